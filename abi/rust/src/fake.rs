//! An in-memory host, to unit test a handler's logic natively, without WebAssembly (only in a
//! build for another target than `wasm32`): [`Fake`] makes the daemon's calls to a handler and
//! shows what they did.
//!
//! ```ignore
//! #[cfg(test)]
//! mod tests {
//!     use super::*;
//!     use wasmhost::fake::Fake;
//!
//!     #[test]
//!     fn register() {
//!         let host = Fake::new(Widget);
//!         let p = Plugin { plugin_type: "example.com/widget".into(), name: "w".into(),
//!                          endpoint: "/w.sock".into(), versions: vec!["v1".into()], ..Plugin::default() };
//!         assert_eq!(host.register(&p), Ok(()));
//!         assert_eq!(host.published().get("endpoint").map(String::as_str), Some("/w.sock"));
//!         assert_eq!(host.kv("example.com/widget", "plugin/w"), None);
//!     }
//! }
//! ```
//!
//! built and run by rustc alone, the SDK first as a native `rlib`:
//!
//! ```text
//! rustc --edition 2021 --crate-type rlib --crate-name wasmhost --out-dir native abi/rust/src/lib.rs
//! rustc --edition 2021 --test --extern wasmhost=native/libwasmhost.rlib -o widget_test widget.rs
//! ./widget_test
//! ```
//!
//! The fake keeps a key-value store per plugin type, as the daemon does (a call's [`kv`]
//! functions reach the store of its plugin's type), the keys published by the last register
//! call, the log, and a function of the test's that answers [`plugin_call`]. It checks what the
//! daemon checks of each host function, with the ABI's limits and the daemon's default ones
//! (`wasmhost config defaults`, the constants below), and returns the daemon's codes and
//! reasons: a store key past [`MAX_KV_ENTRIES`] in one store, or past [`KV_KEYS_PER_HANDLER`]
//! or [`KV_BYTES_PER_HANDLER`] in all of them together (the daemon's quotas of one handler
//! file, which the fake calls [`HANDLER_FILE`]), is refused with [`CODE_TOO_LARGE`] and the
//! daemon's reason. A call that logs more than [`LOG_LINES_PER_CALL`] lines or
//! [`LOG_BYTES_PER_CALL`] bytes, or makes more than [`PLUGIN_CALLS_PER_CALL`] plugin calls, is
//! ended there, as the daemon ends it: it returns [`Error::Fail`] with the daemon's error. The
//! fake does not pool instances, time calls, or sandbox anything: run the built module through
//! `wasmhost handler test` and `wasmhost handler conformance` for that.
//!
//! Its state belongs to the thread that made the [`Fake`], as the tests of `rustc --test` run
//! in threads of their own; the handler's host functions called from another thread find no
//! call in progress, and are denied.
//!
//! [`plugin_call`]: crate::plugin_call
//! [`kv`]: crate::kv
//! [`CODE_TOO_LARGE`]: crate::CODE_TOO_LARGE

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::{
    Error, Handler, Plugin, CODE_BAD_REQUEST, CODE_CONFLICT, CODE_DENIED, CODE_FAILED,
    CODE_NOT_FOUND, CODE_TOO_LARGE,
};
use crate::{
    MAX_KEY_BYTES, MAX_LOG_LINE_BYTES, MAX_REQUEST_BYTES, MAX_RESULT_BYTES, MAX_VALUE_BYTES,
    STATUS_ERROR, STATUS_OK, STATUS_REJECTED,
};

// The limits below are the daemon's (abi, and the defaults of handlers.limits in
// internal/limits): TestFakeLimits (internal/abitest) reads them here and compares them.

/// Keys in one plugin type's store (`abi.MaxKVEntries`).
pub const MAX_KV_ENTRIES: usize = 16384;
/// Keys, and bytes of keys and values, that the stores of one handler's plugin types hold
/// together: the daemon's defaults (`handlers.limits.kvKeysPerHandler`, `kvBytesPerHandler`).
pub const KV_KEYS_PER_HANDLER: usize = 16384;
pub const KV_BYTES_PER_HANDLER: usize = 16 << 20;
/// Lines, and bytes of their messages, that one call may log: the daemon's defaults
/// (`handlers.limits.logLinesPerCall`, `logBytesPerCall`).
pub const LOG_LINES_PER_CALL: usize = 1000;
pub const LOG_BYTES_PER_CALL: usize = 64 << 10;
/// Keys and bytes (keys and values) one register call may publish: the daemon's defaults
/// (`handlers.limits.publishKeys`, `publishBytes`).
pub const PUBLISH_KEYS: usize = 64;
pub const PUBLISH_BYTES: usize = 64 << 10;
/// Plugin calls in one handler call, and the largest response: the daemon's defaults
/// (`handlers.limits.pluginCallsPerCall`, `pluginCallResponseSize`).
pub const PLUGIN_CALLS_PER_CALL: usize = 16;
pub const PLUGIN_CALL_RESPONSE_SIZE: usize = 1 << 20;

/// The reason of a call that failed or refused without giving one, as the daemon says it.
pub const NO_REASON: &str = "(no reason given)";

/// The handler file the fake's reasons name, where the daemon names the handler's file.
pub const HANDLER_FILE: &str = "handler.wasm";

/// A function of the test's that answers a plugin call: the encoded response, or why the call
/// failed ([`CODE_FAILED`](crate::CODE_FAILED), as when the plugin answers with an error).
type Answer = Box<dyn FnMut(&str, &[u8]) -> Result<Vec<u8>, String>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    None,
    Validate,
    Register,
    Deregister,
}

/// The daemon's state of one thread.
struct State {
    live: bool, // a Fake of this thread exists
    call: Call,
    request: Vec<u8>,
    plugin_type: String, // of the call's plugin: whose store the kv functions reach
    plugin: String,
    endpoint: String,
    result: Option<Vec<u8>>,
    error: String, // the reason error_read returns
    stores: BTreeMap<String, BTreeMap<String, Vec<u8>>>, // by plugin type
    kv_keys: usize, // in every store
    kv_bytes: usize, // of their keys and values
    published: BTreeMap<String, String>,
    pending: BTreeMap<String, String>, // published in the register call in progress
    pending_bytes: usize,
    log: Vec<String>,
    log_lines: usize, // logged in the call in progress
    log_bytes: usize,
    answer: Option<Answer>,
    plugin_calls: usize,
    // The last plugin call of this call and its answer: the SDK asks again with a larger
    // buffer when the response did not fit, and that is the same call.
    last: Option<(String, Vec<u8>, Vec<u8>)>,
}

impl State {
    fn new() -> State {
        State {
            live: false,
            call: Call::None,
            request: Vec::new(),
            plugin_type: String::new(),
            plugin: String::new(),
            endpoint: String::new(),
            result: None,
            error: String::new(),
            stores: BTreeMap::new(),
            kv_keys: 0,
            kv_bytes: 0,
            published: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_bytes: 0,
            log: Vec::new(),
            log_lines: 0,
            log_bytes: 0,
            answer: None,
            plugin_calls: 0,
            last: None,
        }
    }

    /// put sets key in the store of plugin_type, counting it in the handler's quotas.
    fn put(&mut self, plugin_type: &str, key: String, val: Vec<u8>) {
        let store = self.stores.entry(plugin_type.to_string()).or_default();
        let (klen, vlen) = (key.len(), val.len());
        match store.insert(key, val) {
            Some(old) => self.kv_bytes = self.kv_bytes + vlen - old.len(),
            None => {
                self.kv_keys += 1;
                self.kv_bytes += klen + vlen;
            }
        }
    }

    /// remove deletes key from the store of plugin_type, giving its room back to the quotas.
    fn remove(&mut self, plugin_type: &str, key: &str) {
        if let Some(old) = self.stores.get_mut(plugin_type).and_then(|m| m.remove(key)) {
            self.kv_keys -= 1;
            self.kv_bytes -= key.len() + old.len();
        }
    }

    /// what names the call in progress as the daemon's errors do: the handler file, the
    /// export, the plugin.
    fn what(&self) -> String {
        let export = match self.call {
            Call::Validate => "wasmhost_validate",
            Call::Register => "wasmhost_register",
            Call::Deregister | Call::None => "wasmhost_deregister",
        };
        let mut what = format!("{} {}", HANDLER_FILE, export);
        if !self.plugin.is_empty() {
            what += &format!(" for plugin {:?}", self.plugin);
        }
        what
    }
}

/// Budget is the panic payload with which a host function ends a call over one of its budgets
/// (resume_unwind: no panic message), and Fake::call turns into the call's failure.
struct Budget(String);

/// over_budget ends the call in progress, as the daemon ends one over a budget of
/// handlers.limits (key): with its error, which the call returns.
fn over_budget(what: String, limit: usize, key: &str) -> ! {
    let why = with(|s| {
        format!(
            "host: budget exceeded: {} {} in one call (the limit is {}, handlers.limits.{})",
            s.what(),
            what,
            limit,
            key
        )
    });
    std::panic::resume_unwind(Box::new(Budget(why)))
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::new());
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// The daemon, for a handler's unit tests: it calls the handler's methods as the daemon calls
/// the module's exports (the plugin encoded as the daemon encodes it, and decoded by the SDK),
/// backs the SDK's host functions, and shows the store, the published keys and the log.
///
/// A new `Fake` starts empty; there is one at a time in a thread (`new` panics while another
/// exists), and dropping it empties the thread's state.
pub struct Fake<H: Handler> {
    handler: H,
    _thread: PhantomData<*const ()>, // its state is the thread's: not Send
}

impl<H: Handler> Fake<H> {
    /// A daemon with an empty store, and no plugin call granted, for handler.
    pub fn new(handler: H) -> Fake<H> {
        with(|s| {
            if s.live {
                panic!("wasmhost::fake::Fake::new: this thread has a Fake already; drop it first");
            }
            *s = State::new();
            s.live = true;
        });
        Fake {
            handler,
            _thread: PhantomData,
        }
    }

    /// The daemon's validate call for p: Ok, or the refusal or failure with the reason the
    /// handler set (`(no reason given)` when it set none).
    pub fn validate(&self, p: &Plugin) -> Result<(), Error> {
        self.call(Call::Validate, p, |h, p| h.validate(p))
    }

    /// The daemon's register call for p. The keys it publishes are kept ([`published`]) only
    /// when it returns Ok.
    ///
    /// [`published`]: Fake::published
    pub fn register(&self, p: &Plugin) -> Result<(), Error> {
        self.call(Call::Register, p, |h, p| h.register(p))
    }

    /// The daemon's deregister call for p.
    pub fn deregister(&self, p: &Plugin) -> Result<(), Error> {
        self.call(Call::Deregister, p, |h, p| h.deregister(p))
    }

    fn call(
        &self,
        call: Call,
        p: &Plugin,
        f: impl FnOnce(&H, &Plugin) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let req = p.encode();
        let n = req.len() as i32;
        with(|s| {
            s.call = call;
            s.request = req;
            s.plugin_type = p.plugin_type.clone();
            s.plugin = p.name.clone();
            s.endpoint = p.endpoint.clone();
            s.result = None;
            s.error.clear();
            s.pending.clear();
            s.pending_bytes = 0;
            s.plugin_calls = 0;
            s.log_lines = 0;
            s.log_bytes = 0;
            s.last = None;
        });
        // Ends the call also when the handler panics (the daemon would count it a trap).
        struct End;
        impl Drop for End {
            fn drop(&mut self) {
                with(|s| {
                    s.call = Call::None;
                    s.pending.clear();
                    s.last = None;
                });
            }
        }
        let end = End;
        // A call over a budget ends with the daemon's error (the Budget the host function
        // unwinds with); any other panic goes on to the test.
        let status = match catch_unwind(AssertUnwindSafe(|| {
            crate::rt::serve(n, |q| f(&self.handler, q))
        })) {
            Ok(status) => status,
            Err(e) => match e.downcast::<Budget>() {
                Ok(b) => {
                    drop(end);
                    if call == Call::Register {
                        with(|s| s.published.clear());
                    }
                    return Err(Error::Fail(b.0));
                }
                Err(e) => resume_unwind(e),
            },
        };
        let (result, published) = with(|s| (s.result.take(), std::mem::take(&mut s.pending)));
        drop(end);
        let reason = match result {
            Some(r) if !r.is_empty() => String::from_utf8_lossy(&r).into_owned(),
            _ => NO_REASON.to_string(),
        };
        if call == Call::Register {
            with(|s| {
                s.published = if status == STATUS_OK {
                    published
                } else {
                    BTreeMap::new()
                }
            });
        }
        match status {
            STATUS_OK => Ok(()),
            STATUS_REJECTED => Err(Error::Reject(reason)),
            STATUS_ERROR => Err(Error::Fail(reason)),
            other => Err(Error::Fail(format!("unknown status {}", other))),
        }
    }

    /// The value of key in the store of plugin_type, or None.
    pub fn kv(&self, plugin_type: &str, key: &str) -> Option<Vec<u8>> {
        with(|s| s.stores.get(plugin_type).and_then(|m| m.get(key)).cloned())
    }

    /// A copy of the store of plugin_type (empty when no call of that type set a key).
    pub fn store(&self, plugin_type: &str) -> BTreeMap<String, Vec<u8>> {
        with(|s| s.stores.get(plugin_type).cloned().unwrap_or_default())
    }

    /// Sets key in the store of plugin_type, as an earlier call (in another instance, before a
    /// restart) would have. It is not checked against the limits, but counts in the quotas
    /// of the calls after it.
    pub fn kv_put(&self, plugin_type: &str, key: &str, value: &[u8]) {
        with(|s| s.put(plugin_type, key.to_string(), value.to_vec()));
    }

    /// The keys published by the last register call: none when it failed or refused.
    pub fn published(&self) -> BTreeMap<String, String> {
        with(|s| s.published.clone())
    }

    /// The lines logged so far, each as "LEVEL message" ("INFO registering ...").
    pub fn log(&self) -> Vec<String> {
        with(|s| s.log.clone())
    }

    /// Grants plugin calls, answered by f(method, request): the encoded response, or Err with
    /// why the call failed, which [`plugin_call`](crate::plugin_call) returns as a
    /// [`CODE_FAILED`] error with that reason. Without it, plugin calls
    /// are denied, as by a daemon that did not grant them.
    pub fn answer_plugin_calls(
        &self,
        f: impl FnMut(&str, &[u8]) -> Result<Vec<u8>, String> + 'static,
    ) {
        with(|s| s.answer = Some(Box::new(f)));
    }
}

impl<H: Handler> Drop for Fake<H> {
    fn drop(&mut self) {
        // Drops the answer function outside the borrow, in case it owns something that
        // reaches back here.
        let old = with(|s| std::mem::replace(s, State::new()));
        drop(old);
    }
}

/// The host functions, as the daemon answers them (internal/host/hostfuncs.go).
pub(crate) mod host {
    use super::*;

    fn in_call(s: &State) -> bool {
        s.call != Call::None
    }

    /// key_code: the code for a bad key, or STATUS_OK.
    fn key_code(key: &[u8]) -> i32 {
        if key.is_empty() {
            CODE_BAD_REQUEST
        } else if key.len() > MAX_KEY_BYTES {
            CODE_TOO_LARGE
        } else {
            STATUS_OK
        }
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    /// copy_out copies what fits of v into buf and returns v's length.
    fn copy_out(buf: &mut [u8], v: &[u8]) -> i32 {
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
        v.len() as i32
    }

    pub fn request_read(buf: &mut [u8]) -> i32 {
        with(|s| {
            if in_call(s) {
                copy_out(buf, &s.request)
            } else {
                0
            }
        })
    }

    pub fn result_set(b: &[u8]) -> i32 {
        with(|s| {
            if !in_call(s) {
                CODE_DENIED
            } else if b.len() > MAX_RESULT_BYTES {
                CODE_TOO_LARGE
            } else {
                s.result = Some(b.to_vec());
                STATUS_OK
            }
        })
    }

    pub fn log(level: i32, b: &[u8]) {
        let name = match level {
            i32::MIN..=0 => "DEBUG",
            1 => "INFO",
            2 => "WARN",
            _ => "ERROR",
        };
        let b = &b[..b.len().min(MAX_LOG_LINE_BYTES)];
        // A line past the call's budget is dropped, and the call ends, as in the daemon.
        let over = with(|s| {
            if !s.live {
                return None;
            }
            if in_call(s) {
                s.log_lines += 1;
                s.log_bytes += b.len();
                if s.log_lines > LOG_LINES_PER_CALL {
                    return Some((
                        format!("logged more than {} lines", LOG_LINES_PER_CALL),
                        LOG_LINES_PER_CALL,
                        "logLinesPerCall",
                    ));
                }
                if s.log_bytes > LOG_BYTES_PER_CALL {
                    return Some((
                        format!("logged more than {} bytes", LOG_BYTES_PER_CALL),
                        LOG_BYTES_PER_CALL,
                        "logBytesPerCall",
                    ));
                }
            }
            s.log.push(format!("{} {}", name, text(b)));
            None
        });
        if let Some((what, limit, key)) = over {
            over_budget(what, limit, key)
        }
    }

    pub fn publish(key: &[u8], val: &[u8]) -> i32 {
        with(|s| {
            if s.call != Call::Register {
                return CODE_DENIED;
            }
            match key_code(key) {
                STATUS_OK if val.len() > MAX_VALUE_BYTES => return CODE_TOO_LARGE,
                STATUS_OK => {}
                code => return code,
            }
            let (key, val) = (text(key), text(val));
            let old = s.pending.get(&key).map(|v| v.len());
            let size = s.pending_bytes + val.len() + if old.is_none() { key.len() } else { 0 }
                - old.unwrap_or(0);
            if old.is_none() && s.pending.len() >= PUBLISH_KEYS {
                s.error = format!(
                    "{} keys published, the most in one call (handlers.limits.publishKeys)",
                    s.pending.len()
                );
                return CODE_TOO_LARGE;
            }
            if size > PUBLISH_BYTES {
                s.error = format!(
                    "{} bytes published would go over {} (handlers.limits.publishBytes)",
                    size, PUBLISH_BYTES
                );
                return CODE_TOO_LARGE;
            }
            s.pending.insert(key, val);
            s.pending_bytes = size;
            STATUS_OK
        })
    }

    pub fn kv_get(key: &[u8], buf: &mut [u8]) -> i32 {
        with(|s| {
            if !in_call(s) {
                return CODE_DENIED;
            }
            match key_code(key) {
                STATUS_OK => s
                    .stores
                    .get(&s.plugin_type)
                    .and_then(|m| m.get(&text(key)))
                    .map_or(CODE_NOT_FOUND, |v| copy_out(buf, v)),
                code => code,
            }
        })
    }

    /// set stores val under key in the store of the call's plugin type, as the daemon's
    /// store does (internal/host/budget.go): CODE_TOO_LARGE, with the reason, when the key is
    /// new in a full store or the handler's quotas would go over.
    fn set(s: &mut State, key: String, val: &[u8]) -> i32 {
        let old = s
            .stores
            .get(&s.plugin_type)
            .map(|m| (m.len(), m.get(&key).map(Vec::len)));
        let (keys, old) = old.unwrap_or((0, None));
        if old.is_none() && keys >= MAX_KV_ENTRIES {
            s.error = format!(
                "the store of this plugin type has {} keys, the most (abi.MaxKVEntries)",
                MAX_KV_ENTRIES
            );
            return CODE_TOO_LARGE;
        }
        let more = match old {
            None => key.len() + val.len(),
            Some(n) => val.len().saturating_sub(n),
        };
        if old.is_none() && s.kv_keys + 1 > KV_KEYS_PER_HANDLER {
            s.error = format!("handler {} holds {} keys in its stores, the most (handlers.limits.kvKeysPerHandler)", HANDLER_FILE, s.kv_keys);
            return CODE_TOO_LARGE;
        }
        if more > 0 && s.kv_bytes + more > KV_BYTES_PER_HANDLER {
            s.error = format!(
                "handler {} holds {} bytes in its stores; {} more would go over {} (handlers.limits.kvBytesPerHandler)",
                HANDLER_FILE, s.kv_bytes, more, KV_BYTES_PER_HANDLER
            );
            return CODE_TOO_LARGE;
        }
        let t = s.plugin_type.clone();
        s.put(&t, key, val.to_vec());
        STATUS_OK
    }

    pub fn kv_set(key: &[u8], val: &[u8]) -> i32 {
        with(|s| {
            if !in_call(s) {
                return CODE_DENIED;
            }
            match key_code(key) {
                STATUS_OK if val.len() > MAX_VALUE_BYTES => CODE_TOO_LARGE,
                STATUS_OK => set(s, text(key), val),
                code => code,
            }
        })
    }

    pub fn kv_delete(key: &[u8]) -> i32 {
        with(|s| {
            if !in_call(s) {
                return CODE_DENIED;
            }
            match key_code(key) {
                STATUS_OK => {
                    let t = s.plugin_type.clone();
                    s.remove(&t, &text(key));
                    STATUS_OK
                }
                code => code,
            }
        })
    }

    pub fn kv_compare_and_set(key: &[u8], old: Option<&[u8]>, val: Option<&[u8]>) -> i32 {
        with(|s| {
            if !in_call(s) {
                return CODE_DENIED;
            }
            let code = key_code(key);
            if code != STATUS_OK {
                return code;
            }
            if old.map_or(0, |o| o.len()) > MAX_VALUE_BYTES
                || val.map_or(0, |v| v.len()) > MAX_VALUE_BYTES
            {
                return CODE_TOO_LARGE;
            }
            let key = text(key);
            if s.stores
                .get(&s.plugin_type)
                .and_then(|m| m.get(&key))
                .map(|v| v.as_slice())
                != old
            {
                return CODE_CONFLICT;
            }
            match val {
                None => {
                    let t = s.plugin_type.clone();
                    s.remove(&t, &key);
                    STATUS_OK
                }
                Some(v) => set(s, key, v),
            }
        })
    }

    pub fn plugin_call(method: &[u8], req: &[u8], resp: &mut [u8]) -> i32 {
        let answer = with(|s| {
            if !in_call(s) || s.answer.is_none() {
                return Err(CODE_DENIED);
            }
            if method.is_empty() || std::str::from_utf8(method).is_err() {
                return Err(CODE_BAD_REQUEST);
            }
            if req.len() > MAX_REQUEST_BYTES {
                return Err(CODE_TOO_LARGE);
            }
            if s.endpoint.is_empty() {
                s.error = "the plugin has no endpoint".to_string();
                return Err(CODE_FAILED);
            }
            s.plugin_calls += 1;
            if s.plugin_calls > PLUGIN_CALLS_PER_CALL {
                // The daemon ends the call (a budget fault): so does the fake.
                return Ok(None);
            }
            match &s.last {
                Some((m, r, out)) if m.as_bytes() == method && r.as_slice() == req => {
                    Ok(Some(Ok(out.clone())))
                }
                _ => Ok(Some(Err(s.answer.take().unwrap()))),
            }
        });
        let out = match answer {
            Err(code) => return code,
            Ok(None) => over_budget(
                format!("made more than {} plugin_call calls", PLUGIN_CALLS_PER_CALL),
                PLUGIN_CALLS_PER_CALL,
                "pluginCallsPerCall",
            ),
            Ok(Some(Ok(out))) => Ok(out),
            Ok(Some(Err(mut f))) => {
                // Called outside the borrow: the test's function may look at the Fake.
                let method = text(method);
                let r = f(&method, req);
                with(|s| {
                    s.answer = Some(f);
                    if let Ok(out) = &r {
                        s.last = Some((method, req.to_vec(), out.clone()));
                    }
                });
                r
            }
        };
        match out {
            Err(why) => with(|s| {
                s.error = why;
                CODE_FAILED
            }),
            Ok(out) if out.len() > PLUGIN_CALL_RESPONSE_SIZE => with(|s| {
                s.error = format!(
                    "response of {} bytes over the limit of {} (handlers.limits.pluginCallResponseSize)",
                    out.len(),
                    PLUGIN_CALL_RESPONSE_SIZE
                );
                CODE_TOO_LARGE
            }),
            Ok(out) => copy_out(resp, &out),
        }
    }

    pub fn error_read(buf: &mut [u8]) -> i32 {
        with(|s| copy_out(buf, s.error.as_bytes()))
    }
}

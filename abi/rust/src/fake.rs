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
//! The fake keeps one key-value store (every plugin type shares it), the keys published by the
//! last register call, the log, and a function of the test's that answers [`plugin_call`]. It
//! checks what the daemon checks of each host function, with the ABI's limits and the daemon's
//! default ones (`wasmhost config defaults`), and returns the daemon's codes and reasons; it
//! does not pool instances, time calls, or sandbox anything: run the built module through
//! `wasmhost handler test` and `wasmhost handler conformance` for that.
//!
//! Its state belongs to the thread that made the [`Fake`], as the tests of `rustc --test` run
//! in threads of their own; the handler's host functions called from another thread find no
//! call in progress, and are denied.
//!
//! [`plugin_call`]: crate::plugin_call

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::{Error, Handler, Plugin, CODE_BAD_REQUEST, CODE_CONFLICT, CODE_DENIED, CODE_FAILED, CODE_NOT_FOUND, CODE_TOO_LARGE};
use crate::{
    MAX_KEY_BYTES, MAX_LOG_LINE_BYTES, MAX_REQUEST_BYTES, MAX_RESULT_BYTES, MAX_VALUE_BYTES, STATUS_ERROR, STATUS_OK, STATUS_REJECTED,
};

/// Keys in one plugin type's store (`abi.MaxKVEntries`).
pub const MAX_KV_ENTRIES: usize = 16384;
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
    endpoint: String,
    result: Option<Vec<u8>>,
    error: String, // the reason error_read returns
    kv: BTreeMap<String, Vec<u8>>,
    published: BTreeMap<String, String>,
    pending: BTreeMap<String, String>, // published in the register call in progress
    pending_bytes: usize,
    log: Vec<String>,
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
            endpoint: String::new(),
            result: None,
            error: String::new(),
            kv: BTreeMap::new(),
            published: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_bytes: 0,
            log: Vec::new(),
            answer: None,
            plugin_calls: 0,
            last: None,
        }
    }
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
        Fake { handler, _thread: PhantomData }
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

    fn call(&self, call: Call, p: &Plugin, f: impl FnOnce(&H, &Plugin) -> Result<(), Error>) -> Result<(), Error> {
        let req = p.encode();
        let n = req.len() as i32;
        with(|s| {
            s.call = call;
            s.request = req;
            s.endpoint = p.endpoint.clone();
            s.result = None;
            s.error.clear();
            s.pending.clear();
            s.pending_bytes = 0;
            s.plugin_calls = 0;
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
        let status = crate::rt::serve(n, |q| f(&self.handler, q));
        let (result, published) = with(|s| (s.result.take(), std::mem::take(&mut s.pending)));
        drop(end);
        let reason = match result {
            Some(r) if !r.is_empty() => String::from_utf8_lossy(&r).into_owned(),
            _ => NO_REASON.to_string(),
        };
        if call == Call::Register {
            with(|s| s.published = if status == STATUS_OK { published } else { BTreeMap::new() });
        }
        match status {
            STATUS_OK => Ok(()),
            STATUS_REJECTED => Err(Error::Reject(reason)),
            STATUS_ERROR => Err(Error::Fail(reason)),
            other => Err(Error::Fail(format!("unknown status {}", other))),
        }
    }

    /// The value of key in the store, or None.
    pub fn kv(&self, key: &str) -> Option<Vec<u8>> {
        with(|s| s.kv.get(key).cloned())
    }

    /// A copy of the store.
    pub fn store(&self) -> BTreeMap<String, Vec<u8>> {
        with(|s| s.kv.clone())
    }

    /// Sets key in the store, as an earlier call (in another instance, before a restart)
    /// would have.
    pub fn kv_put(&self, key: &str, value: &[u8]) {
        with(|s| s.kv.insert(key.to_string(), value.to_vec()));
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
    /// [`CODE_FAILED`](crate::CODE_FAILED) error with that reason. Without it, plugin calls
    /// are denied, as by a daemon that did not grant them.
    pub fn answer_plugin_calls(&self, f: impl FnMut(&str, &[u8]) -> Result<Vec<u8>, String> + 'static) {
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
        with(|s| if in_call(s) { copy_out(buf, &s.request) } else { 0 })
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
        with(|s| {
            if s.live {
                s.log.push(format!("{} {}", name, text(b)))
            }
        })
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
            let size = s.pending_bytes + val.len() + if old.is_none() { key.len() } else { 0 } - old.unwrap_or(0);
            if old.is_none() && s.pending.len() >= PUBLISH_KEYS {
                s.error = format!("{} keys published, the most in one call (handlers.limits.publishKeys)", s.pending.len());
                return CODE_TOO_LARGE;
            }
            if size > PUBLISH_BYTES {
                s.error = format!("{} bytes published would go over {} (handlers.limits.publishBytes)", size, PUBLISH_BYTES);
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
                STATUS_OK => s.kv.get(&text(key)).map_or(CODE_NOT_FOUND, |v| copy_out(buf, v)),
                code => code,
            }
        })
    }

    /// set stores val under key, as the daemon's store does: CODE_TOO_LARGE, with the reason,
    /// when the key is new in a full store.
    fn set(s: &mut State, key: String, val: &[u8]) -> i32 {
        if !s.kv.contains_key(&key) && s.kv.len() >= MAX_KV_ENTRIES {
            s.error = format!("the store of this plugin type has {} keys, the most (abi.MaxKVEntries)", MAX_KV_ENTRIES);
            return CODE_TOO_LARGE;
        }
        s.kv.insert(key, val.to_vec());
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
                    s.kv.remove(&text(key));
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
            if old.map_or(0, |o| o.len()) > MAX_VALUE_BYTES || val.map_or(0, |v| v.len()) > MAX_VALUE_BYTES {
                return CODE_TOO_LARGE;
            }
            let key = text(key);
            if s.kv.get(&key).map(|v| v.as_slice()) != old {
                return CODE_CONFLICT;
            }
            match val {
                None => {
                    s.kv.remove(&key);
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
                // The daemon ends the call (a budget fault): so does the fake, with a panic.
                return Ok(None);
            }
            match &s.last {
                Some((m, r, out)) if m.as_bytes() == method && r.as_slice() == req => Ok(Some(Ok(out.clone()))),
                _ => Ok(Some(Err(s.answer.take().unwrap()))),
            }
        });
        let out = match answer {
            Err(code) => return code,
            Ok(None) => panic!(
                "wasmhost fake host: plugin_call: the handler made more than {} plugin calls in one call: the daemon ends the call (handlers.limits.pluginCallsPerCall)",
                PLUGIN_CALLS_PER_CALL
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

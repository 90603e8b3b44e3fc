//! The Rust SDK for wasmhost handlers: WebAssembly modules that validate, register and
//! deregister the plugins of one or more plugin types (ABI v1, `abi/README.md`).
//!
//! A handler is a type implementing [`Handler`], exported with [`export!`] and its
//! [`Manifest`]:
//!
//! ```ignore
//! use wasmhost::{Error, Handler, Manifest, Plugin};
//!
//! struct Widget;
//!
//! impl Handler for Widget {
//!     fn validate(&self, p: &Plugin) -> Result<(), Error> { Ok(()) } // or Err(Error::reject("why"))
//!     fn register(&self, p: &Plugin) -> Result<(), Error> { Ok(wasmhost::publish("endpoint", &p.endpoint)?) }
//!     fn deregister(&self, _p: &Plugin) -> Result<(), Error> { Ok(()) }
//! }
//!
//! wasmhost::export!(Widget, Manifest { plugin_types: &["example.com/widget"], name: "widget", version: "0.1.0" });
//! ```
//!
//! Built with rustc alone (the crate has no dependencies) for `wasm32-wasip1` (rustc 1.78 and
//! later) or `wasm32-wasi` (before 1.78), as a `cdylib`; `abi/rust/build widget.rs` picks the
//! target the rustc in use has and runs:
//!
//! ```text
//! rustc --edition 2021 --crate-type rlib --target $TARGET -O -C panic=abort --crate-name wasmhost abi/rust/src/lib.rs
//! rustc --edition 2021 --crate-type cdylib --target $TARGET -O -C panic=abort -C lto -C strip=symbols \
//!     -C link-arg=-zstack-size=65536 --extern wasmhost=libwasmhost.rlib -o widget.wasm widget.rs
//! ```
//!
//! In a build for another target (`rustc --test`), the host functions are those of an in-memory
//! host, [`fake::Fake`], which makes the daemon's calls to a handler and shows the stores, the
//! published keys and the log, so that a handler's logic can be unit tested natively.
//!
//! The host pools instances of a module and throws one away after any trap or timeout (a panic
//! is a trap: WebAssembly cannot unwind), so a handler keeps nothing in its own memory from one
//! call to the next: what must last goes in the key-value store, [`kv`].

use std::fmt;

/// The ABI version this SDK implements (`wasmhost_abi_version`).
pub const ABI_VERSION: i32 = 1;

/// Statuses of the handler exports (`abi.Status*`).
pub const STATUS_OK: i32 = 0;
pub const STATUS_REJECTED: i32 = 1;
pub const STATUS_ERROR: i32 = 2;

/// Codes of host functions; non-negative values are `STATUS_OK` or lengths (`abi.Code*`).
pub const CODE_NOT_FOUND: i32 = -1;
pub const CODE_TOO_LARGE: i32 = -2;
pub const CODE_DENIED: i32 = -3;
pub const CODE_FAILED: i32 = -4;
pub const CODE_BAD_REQUEST: i32 = -5;
pub const CODE_CONFLICT: i32 = -6;

/// Limits of ABI v1 (`abi.Max*`).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;
pub const MAX_RESULT_BYTES: usize = 4 << 10;
pub const MAX_LOG_LINE_BYTES: usize = 4 << 10;
pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The plugin a call is about, as it described itself in GetInfo (`PluginRequest`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plugin {
    /// The registration socket's path.
    pub socket: String,
    /// The plugin type, e.g. `CSIPlugin`.
    pub plugin_type: String,
    /// The plugin's name.
    pub name: String,
    /// Where it serves its own API (its socket when it gave none).
    pub endpoint: String,
    /// The versions it supports, as it sent them.
    pub versions: Vec<String>,
}

impl Plugin {
    /// Whether the plugin listed version `v`.
    pub fn supports(&self, v: &str) -> bool {
        self.versions.iter().any(|s| s == v)
    }

    /// Decodes an encoded `PluginRequest`. Unknown fields are skipped.
    pub fn decode(b: &[u8]) -> Result<Plugin, wire::Malformed> {
        let mut p = Plugin::default();
        for f in wire::Reader::new(b) {
            let f = f?;
            if f.num > 5 || f.wire_type != wire::BYTES {
                continue;
            }
            let s = f.text()?.to_string();
            match f.num {
                1 => p.socket = s,
                2 => p.plugin_type = s,
                3 => p.name = s,
                4 => p.endpoint = s,
                _ => p.versions.push(s),
            }
        }
        Ok(p)
    }

    /// Encodes it as a `PluginRequest`, as the host does.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for (num, s) in [
            (1, &self.socket),
            (2, &self.plugin_type),
            (3, &self.name),
            (4, &self.endpoint),
        ] {
            if !s.is_empty() {
                wire::append_bytes(&mut b, num, s.as_bytes());
            }
        }
        for v in &self.versions {
            wire::append_bytes(&mut b, 5, v.as_bytes());
        }
        b
    }
}

/// What a module says about itself: the plugin types it handles (at least one), and a name and
/// version operators see (empty for none).
#[derive(Clone, Copy, Debug)]
pub struct Manifest {
    pub plugin_types: &'static [&'static str],
    pub name: &'static str,
    pub version: &'static str,
}

impl Manifest {
    /// Encodes it as the ABI's `Manifest` message.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        for t in self.plugin_types {
            wire::append_bytes(&mut b, 1, t.as_bytes());
        }
        if !self.name.is_empty() {
            wire::append_bytes(&mut b, 2, self.name.as_bytes());
        }
        if !self.version.is_empty() {
            wire::append_bytes(&mut b, 3, self.version.as_bytes());
        }
        b
    }
}

/// Why a handler call did not succeed: a refusal of the plugin, or a failure of the handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The plugin is refused and told the reason (`StatusRejected`); the host asks again only
    /// when something that could change the answer changes.
    Reject(String),
    /// The handler failed (`StatusError`); the host retries later with backoff.
    Fail(String),
}

impl Error {
    pub fn reject(reason: impl Into<String>) -> Error {
        Error::Reject(reason.into())
    }
    pub fn fail(reason: impl Into<String>) -> Error {
        Error::Fail(reason.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Reject(s) | Error::Fail(s) => f.write_str(s),
        }
    }
}

/// A host function's failure: its name, the key, and the code it returned. `?` turns it into
/// an [`Error::Fail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    pub function: &'static str,
    pub key: String,
    pub code: i32,
    /// The host's reason (`error_read`), when it gave one.
    pub reason: String,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.function)?;
        if !self.key.is_empty() {
            write!(f, " {}", self.key)?;
        }
        write!(f, ": {}", code_text(self.code))?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

impl From<HostError> for Error {
    fn from(e: HostError) -> Error {
        Error::Fail(e.to_string())
    }
}

/// Names a host function's code: "too large", "denied", ...
pub fn code_text(code: i32) -> &'static str {
    match code {
        CODE_NOT_FOUND => "not found",
        CODE_TOO_LARGE => "too large",
        CODE_DENIED => "denied",
        CODE_FAILED => "failed",
        CODE_BAD_REQUEST => "bad request",
        CODE_CONFLICT => "conflict",
        c if c >= 0 => "ok",
        _ => "unknown host code",
    }
}

/// A handler: one method per call from the host. `validate` is called first; `register` after
/// a successful validate; `deregister` for a plugin that was registered.
pub trait Handler {
    fn validate(&self, p: &Plugin) -> Result<(), Error>;
    fn register(&self, p: &Plugin) -> Result<(), Error>;
    fn deregister(&self, p: &Plugin) -> Result<(), Error>;
}

/// Exports a [`Handler`] value and its [`Manifest`] as the module's ABI exports. Use it once,
/// at the top level of the crate.
#[macro_export]
macro_rules! export {
    ($handler:expr, $manifest:expr) => {
        #[no_mangle]
        pub extern "C" fn wasmhost_abi_version() -> i32 {
            $crate::ABI_VERSION
        }
        #[no_mangle]
        pub extern "C" fn wasmhost_manifest() -> i32 {
            $crate::rt::manifest(&$manifest)
        }
        #[no_mangle]
        pub extern "C" fn wasmhost_validate(request_len: i32) -> i32 {
            $crate::rt::serve(request_len, |p| $crate::Handler::validate(&$handler, p))
        }
        #[no_mangle]
        pub extern "C" fn wasmhost_register(request_len: i32) -> i32 {
            $crate::rt::serve(request_len, |p| $crate::Handler::register(&$handler, p))
        }
        #[no_mangle]
        pub extern "C" fn wasmhost_deregister(request_len: i32) -> i32 {
            $crate::rt::serve(request_len, |p| $crate::Handler::deregister(&$handler, p))
        }
    };
}

/// Log levels (`abi.LogLevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

/// Writes a line to the daemon's log; lines are cut at [`MAX_LOG_LINE_BYTES`].
pub fn log(level: Level, msg: &str) {
    let b = cut(msg.as_bytes(), MAX_LOG_LINE_BYTES);
    host::log(level as i32, b)
}

/// Publishes a key and value about the plugin being registered (only in `register`).
pub fn publish(key: &str, value: &str) -> Result<(), HostError> {
    check(
        "publish",
        key,
        host::publish(key.as_bytes(), value.as_bytes()),
    )
    .map(|_| ())
}

/// The key-value store of the plugin type of the current call: shared by every instance of the
/// module and outliving them.
pub mod kv {
    use super::{check, host, HostError, CODE_CONFLICT, CODE_NOT_FOUND};

    /// The value of `key`, or `None` when it does not exist.
    pub fn get(key: &str) -> Result<Option<Vec<u8>>, HostError> {
        let mut buf = vec![0u8; 256];
        // The value may change size between two reads when another instance sets it: try a
        // few times with a buffer of the size last reported.
        for _ in 0..4 {
            let n = host::kv_get(key.as_bytes(), &mut buf);
            if n == CODE_NOT_FOUND {
                return Ok(None);
            }
            let n = check("kv_get", key, n)? as usize;
            if n <= buf.len() {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            buf = vec![0u8; n];
        }
        Err(HostError {
            function: "kv_get",
            key: key.to_string(),
            code: super::CODE_FAILED,
            reason: "the value kept changing size while being read".to_string(),
        })
    }

    /// Sets `key` to `value`.
    pub fn set(key: &str, value: &[u8]) -> Result<(), HostError> {
        check("kv_set", key, host::kv_set(key.as_bytes(), value)).map(|_| ())
    }

    /// Deletes `key`; deleting a key that does not exist is not an error.
    pub fn delete(key: &str) -> Result<(), HostError> {
        check("kv_delete", key, host::kv_delete(key.as_bytes())).map(|_| ())
    }

    /// Sets `key` to `value` if its value is still `old`, atomically (ABI v1.1). `old` None:
    /// only if the key does not exist; `value` None: delete it. Returns false, changing
    /// nothing, when the value was not `old`: read it again and decide again.
    pub fn compare_and_set(
        key: &str,
        old: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<bool, HostError> {
        match host::kv_compare_and_set(key.as_bytes(), old, value) {
            CODE_CONFLICT => Ok(false),
            code => check("kv_compare_and_set", key, code).map(|_| true),
        }
    }
}

/// Calls `method` ("/package.Service/Method") on the endpoint of the plugin being handled, with
/// `req` an encoded request message, and returns the encoded response. It needs the
/// `plugin_call` capability, granted by the operator: a module that calls it imports
/// `plugin_call` and loads only with the grant.
pub fn plugin_call(method: &str, req: &[u8]) -> Result<Vec<u8>, HostError> {
    let mut resp = vec![0u8; 64 << 10];
    for _ in 0..2 {
        let n = host::plugin_call(method.as_bytes(), req, &mut resp);
        let n = check("plugin_call", method, n)? as usize;
        if n <= resp.len() {
            resp.truncate(n);
            return Ok(resp);
        }
        resp = vec![0u8; n];
    }
    Err(HostError {
        function: "plugin_call",
        key: method.to_string(),
        code: CODE_FAILED,
        reason: "the response kept growing".to_string(),
    })
}

/// The host's reason for the last host function that failed in this call (`error_read`).
pub fn error_reason() -> String {
    let n = host::error_read(&mut []);
    if n <= 0 {
        return String::new();
    }
    let mut buf = vec![0u8; n as usize];
    let m = host::error_read(&mut buf);
    if m < 0 || m as usize > buf.len() {
        return String::new();
    }
    buf.truncate(m as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

fn check(function: &'static str, key: &str, code: i32) -> Result<i32, HostError> {
    if code >= 0 {
        return Ok(code);
    }
    let reason = if code == CODE_FAILED || code == CODE_TOO_LARGE {
        error_reason()
    } else {
        String::new()
    };
    Err(HostError {
        function,
        key: key.to_string(),
        code,
        reason,
    })
}

/// cut cuts b to at most n bytes without splitting a UTF-8 sequence.
fn cut(b: &[u8], n: usize) -> &[u8] {
    if b.len() <= n {
        return b;
    }
    let mut n = n;
    while n > 0 && (b[n] & 0xc0) == 0x80 {
        n -= 1;
    }
    &b[..n]
}

/// What [`export!`] expands to calls; not for handlers.
#[doc(hidden)]
pub mod rt {
    use super::*;

    pub fn manifest(m: &Manifest) -> i32 {
        if m.plugin_types.is_empty() {
            return result(
                STATUS_ERROR,
                "wasmhost (Rust): the manifest names no plugin type",
            );
        }
        let b = m.encode();
        if b.len() > MAX_RESULT_BYTES {
            return result(
                STATUS_ERROR,
                "wasmhost (Rust): the encoded manifest is over MAX_RESULT_BYTES",
            );
        }
        host::result_set(&b);
        STATUS_OK
    }

    pub fn serve(request_len: i32, f: impl FnOnce(&Plugin) -> Result<(), Error>) -> i32 {
        if request_len < 0 || request_len as usize > MAX_REQUEST_BYTES {
            return result(
                STATUS_ERROR,
                "wasmhost (Rust): the request length is out of range",
            );
        }
        let mut buf = vec![0u8; request_len as usize];
        if host::request_read(&mut buf) != request_len {
            return result(
                STATUS_ERROR,
                "wasmhost (Rust): request_read did not return the request length",
            );
        }
        let p = match Plugin::decode(&buf) {
            Ok(p) => p,
            Err(e) => {
                return result(
                    STATUS_ERROR,
                    &format!("wasmhost (Rust): decoding the request: {}", e),
                )
            }
        };
        match f(&p) {
            Ok(()) => STATUS_OK,
            Err(Error::Reject(r)) => result(STATUS_REJECTED, &r),
            Err(Error::Fail(r)) => result(STATUS_ERROR, &r),
        }
    }

    fn result(status: i32, reason: &str) -> i32 {
        host::result_set(cut(reason.as_bytes(), MAX_RESULT_BYTES));
        status
    }
}

/// The protocol buffers wire format (as abi/wire), for the ABI's messages and those of plugin
/// calls.
pub mod wire {
    use std::fmt;

    pub const VARINT: u8 = 0;
    pub const FIXED64: u8 = 1;
    pub const BYTES: u8 = 2;
    pub const FIXED32: u8 = 5;

    /// A malformed message: what is wrong, and in which field (0 when the tag was unreadable).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Malformed {
        pub field: u32,
        pub what: &'static str,
    }

    impl fmt::Display for Malformed {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.field == 0 {
                write!(f, "malformed protobuf message: {}", self.what)
            } else {
                write!(
                    f,
                    "malformed protobuf message: field {}: {}",
                    self.field, self.what
                )
            }
        }
    }

    pub fn append_varint(b: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            b.push(v as u8 | 0x80);
            v >>= 7;
        }
        b.push(v as u8);
    }

    pub fn append_tag(b: &mut Vec<u8>, num: u32, wire_type: u8) {
        append_varint(b, (num as u64) << 3 | (wire_type & 7) as u64);
    }

    /// Appends a length-delimited field (a string, bytes, or a message encoded beforehand).
    pub fn append_bytes(b: &mut Vec<u8>, num: u32, v: &[u8]) {
        append_tag(b, num, BYTES);
        append_varint(b, v.len() as u64);
        b.extend_from_slice(v);
    }

    pub fn append_uint(b: &mut Vec<u8>, num: u32, v: u64) {
        append_tag(b, num, VARINT);
        append_varint(b, v);
    }

    /// One field of a message.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Field<'a> {
        pub num: u32,
        pub wire_type: u8,
        /// A VARINT field's value.
        pub varint: u64,
        /// A BYTES field's content, or the bytes of a fixed-size one.
        pub data: &'a [u8],
    }

    impl<'a> Field<'a> {
        /// The field as a string, which must be valid UTF-8.
        pub fn text(&self) -> Result<&'a str, Malformed> {
            if self.wire_type != BYTES {
                return Err(Malformed {
                    field: self.num,
                    what: "unexpected wire type",
                });
            }
            std::str::from_utf8(self.data).map_err(|_| Malformed {
                field: self.num,
                what: "not valid UTF-8",
            })
        }
    }

    /// The fields of a message, in order; an error ends it.
    pub struct Reader<'a> {
        b: &'a [u8],
    }

    impl<'a> Reader<'a> {
        pub fn new(b: &'a [u8]) -> Reader<'a> {
            Reader { b }
        }

        fn varint(&mut self) -> Option<u64> {
            let mut v = 0u64;
            for i in 0..self.b.len().min(10) {
                let c = self.b[i];
                if i == 9 && c > 1 {
                    return None;
                }
                v |= ((c & 0x7f) as u64) << (7 * i);
                if c < 0x80 {
                    self.b = &self.b[i + 1..];
                    return Some(v);
                }
            }
            None
        }

        fn field(&mut self) -> Result<Field<'a>, Malformed> {
            let tag = self.varint().ok_or(Malformed {
                field: 0,
                what: "bad field tag",
            })?;
            let num = tag >> 3;
            if num == 0 || num > 0x7fff_ffff {
                return Err(Malformed {
                    field: 0,
                    what: "bad field tag",
                });
            }
            let mut f = Field {
                num: num as u32,
                wire_type: (tag & 7) as u8,
                varint: 0,
                data: &[],
            };
            let n = match f.wire_type {
                VARINT => {
                    f.varint = self.varint().ok_or(Malformed {
                        field: f.num,
                        what: "bad varint",
                    })?;
                    return Ok(f);
                }
                FIXED64 => 8,
                FIXED32 => 4,
                BYTES => {
                    let size = self.varint().ok_or(Malformed {
                        field: f.num,
                        what: "truncated",
                    })?;
                    if size > self.b.len() as u64 {
                        return Err(Malformed {
                            field: f.num,
                            what: "truncated",
                        });
                    }
                    size as usize
                }
                _ => {
                    return Err(Malformed {
                        field: f.num,
                        what: "unsupported wire type",
                    })
                }
            };
            if n > self.b.len() {
                return Err(Malformed {
                    field: f.num,
                    what: "truncated",
                });
            }
            f.data = &self.b[..n];
            self.b = &self.b[n..];
            Ok(f)
        }
    }

    impl<'a> Iterator for Reader<'a> {
        type Item = Result<Field<'a>, Malformed>;

        fn next(&mut self) -> Option<Self::Item> {
            if self.b.is_empty() {
                return None;
            }
            let r = self.field();
            if r.is_err() {
                self.b = &[];
            }
            Some(r)
        }
    }
}

/// The host functions of ABI v1 in a WebAssembly build; elsewhere (a native build, for unit
/// tests) those of the in-memory host of module `fake`.
#[cfg(target_family = "wasm")]
mod host {
    #[link(wasm_import_module = "wasmhost")]
    extern "C" {
        #[link_name = "request_read"]
        fn request_read_(ptr: *mut u8, cap: u32) -> i32;
        #[link_name = "result_set"]
        fn result_set_(ptr: *const u8, len: u32) -> i32;
        #[link_name = "log"]
        fn log_(level: i32, ptr: *const u8, len: u32);
        #[link_name = "publish"]
        fn publish_(key: *const u8, key_len: u32, val: *const u8, val_len: u32) -> i32;
        #[link_name = "kv_get"]
        fn kv_get_(key: *const u8, key_len: u32, buf: *mut u8, cap: u32) -> i32;
        #[link_name = "kv_set"]
        fn kv_set_(key: *const u8, key_len: u32, val: *const u8, val_len: u32) -> i32;
        #[link_name = "kv_delete"]
        fn kv_delete_(key: *const u8, key_len: u32) -> i32;
        #[link_name = "kv_compare_and_set"]
        fn kv_compare_and_set_(
            key: *const u8,
            key_len: u32,
            old: *const u8,
            old_len: i32,
            val: *const u8,
            val_len: i32,
        ) -> i32;
        #[link_name = "plugin_call"]
        fn plugin_call_(
            method: *const u8,
            method_len: u32,
            req: *const u8,
            req_len: u32,
            resp: *mut u8,
            resp_cap: u32,
        ) -> i32;
        #[link_name = "error_read"]
        fn error_read_(ptr: *mut u8, cap: u32) -> i32;
    }

    // Safety, for every call below: the host reads and writes only the regions given, whose
    // pointers and lengths come from live slices, and keeps no pointer after it returns.

    pub fn request_read(buf: &mut [u8]) -> i32 {
        unsafe { request_read_(buf.as_mut_ptr(), buf.len() as u32) }
    }
    pub fn result_set(b: &[u8]) -> i32 {
        unsafe { result_set_(b.as_ptr(), b.len() as u32) }
    }
    pub fn log(level: i32, b: &[u8]) {
        unsafe { log_(level, b.as_ptr(), b.len() as u32) }
    }
    pub fn publish(key: &[u8], val: &[u8]) -> i32 {
        unsafe {
            publish_(
                key.as_ptr(),
                key.len() as u32,
                val.as_ptr(),
                val.len() as u32,
            )
        }
    }
    pub fn kv_get(key: &[u8], buf: &mut [u8]) -> i32 {
        unsafe {
            kv_get_(
                key.as_ptr(),
                key.len() as u32,
                buf.as_mut_ptr(),
                buf.len() as u32,
            )
        }
    }
    pub fn kv_set(key: &[u8], val: &[u8]) -> i32 {
        unsafe {
            kv_set_(
                key.as_ptr(),
                key.len() as u32,
                val.as_ptr(),
                val.len() as u32,
            )
        }
    }
    pub fn kv_delete(key: &[u8]) -> i32 {
        unsafe { kv_delete_(key.as_ptr(), key.len() as u32) }
    }
    pub fn kv_compare_and_set(key: &[u8], old: Option<&[u8]>, val: Option<&[u8]>) -> i32 {
        let (op, ol) = old.map_or((std::ptr::null(), -1), |o| (o.as_ptr(), o.len() as i32));
        let (vp, vl) = val.map_or((std::ptr::null(), -1), |v| (v.as_ptr(), v.len() as i32));
        unsafe { kv_compare_and_set_(key.as_ptr(), key.len() as u32, op, ol, vp, vl) }
    }
    pub fn plugin_call(method: &[u8], req: &[u8], resp: &mut [u8]) -> i32 {
        unsafe {
            plugin_call_(
                method.as_ptr(),
                method.len() as u32,
                req.as_ptr(),
                req.len() as u32,
                resp.as_mut_ptr(),
                resp.len() as u32,
            )
        }
    }
    pub fn error_read(buf: &mut [u8]) -> i32 {
        unsafe { error_read_(buf.as_mut_ptr(), buf.len() as u32) }
    }
}

// Outside WebAssembly (a native build: a handler's unit tests), the host functions are the
// fake host's, which a test drives with fake::Fake.
#[cfg(not(target_family = "wasm"))]
pub mod fake;
#[cfg(not(target_family = "wasm"))]
use fake::host;

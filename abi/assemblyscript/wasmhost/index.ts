// The AssemblyScript SDK for wasmhost handlers (ABI v1, abi/README.md): the exports, the host
// functions, the request's decoding and the manifest's encoding. A handler extends Handler,
// hands it to handle() with its Manifest, and re-exports the ABI's functions from its entry
// file:
//
//   import { Handler, Manifest, Plugin, handle, OK, reject } from "wasmhost";
//   export { wasmhost_abi_version, wasmhost_manifest, wasmhost_validate, wasmhost_register, wasmhost_deregister } from "wasmhost";
//
//   class Widget extends Handler {
//     validate(p: Plugin): i32 { return OK; }   // or reject("why")
//     register(p: Plugin): i32 { return OK; }
//     deregister(p: Plugin): i32 { return OK; }
//   }
//   handle(new Manifest(["example.com/widget"], "widget", "0.1.0"), new Widget());
//
// Built with asc (npm assemblyscript), with this directory's parent on the package path and no
// abort import (the host provides only wasmhost and WASI functions):
//
//   asc widget.ts --path abi/assemblyscript --use abort= -O3 -o widget.wasm
//
// The host pools instances and throws one away after any trap or timeout, so a handler keeps
// nothing in its globals from one call to the next: what must last goes in the key-value store
// (kvGet, kvSet, ...).

// The ABI version this SDK implements (wasmhost_abi_version).
export const ABI_VERSION: i32 = 1;

// Statuses a handler method returns (abi.Status*).
export const OK: i32 = 0;
export const REJECTED: i32 = 1;
export const ERROR: i32 = 2;

// Codes host functions return; non-negative values are OK or lengths (abi.Code*).
export const NOT_FOUND: i32 = -1;
export const TOO_LARGE: i32 = -2;
export const DENIED: i32 = -3;
export const FAILED: i32 = -4;
export const BAD_REQUEST: i32 = -5;
export const CONFLICT: i32 = -6;

// Log levels (abi.LogLevel).
export const LOG_DEBUG: i32 = 0;
export const LOG_INFO: i32 = 1;
export const LOG_WARN: i32 = 2;
export const LOG_ERROR: i32 = 3;

// Limits of ABI v1 (abi.Max*).
export const MAX_REQUEST_BYTES: i32 = 64 << 10;
export const MAX_RESULT_BYTES: i32 = 4 << 10;
export const MAX_LOG_LINE_BYTES: i32 = 4 << 10;

// The host functions of ABI v1.
@external("wasmhost", "request_read")
declare function host_request_read(ptr: usize, cap: u32): i32;
@external("wasmhost", "result_set")
declare function host_result_set(ptr: usize, len: u32): i32;
@external("wasmhost", "log")
declare function host_log(level: i32, ptr: usize, len: u32): void;
@external("wasmhost", "publish")
declare function host_publish(key: usize, keyLen: u32, val: usize, valLen: u32): i32;
@external("wasmhost", "kv_get")
declare function host_kv_get(key: usize, keyLen: u32, buf: usize, cap: u32): i32;
@external("wasmhost", "kv_set")
declare function host_kv_set(key: usize, keyLen: u32, val: usize, valLen: u32): i32;
@external("wasmhost", "kv_delete")
declare function host_kv_delete(key: usize, keyLen: u32): i32;
@external("wasmhost", "kv_compare_and_set")
declare function host_kv_compare_and_set(key: usize, keyLen: u32, old: usize, oldLen: i32, val: usize, valLen: i32): i32;
@external("wasmhost", "plugin_call")
declare function host_plugin_call(method: usize, methodLen: u32, req: usize, reqLen: u32, resp: usize, respCap: u32): i32;
@external("wasmhost", "error_read")
declare function host_error_read(ptr: usize, cap: u32): i32;

// The plugin a call is about, as it described itself in GetInfo (PluginRequest).
export class Plugin {
  socket: string = "";     // the registration socket's path
  pluginType: string = ""; // the plugin type, e.g. CSIPlugin
  name: string = "";       // the plugin's name
  endpoint: string = "";   // where it serves its own API (its socket when it gave none)
  versions: string[] = []; // the versions it supports, as it sent them

  // Whether the plugin listed version v.
  supports(v: string): bool {
    return this.versions.includes(v);
  }
}

// What the module says about itself: the plugin types it handles (at least one), and a name
// and version operators see ("" for none).
export class Manifest {
  constructor(public pluginTypes: string[], public name: string = "", public version: string = "") {}

  encode(): Uint8Array {
    const w = new Writer();
    for (let i = 0; i < this.pluginTypes.length; i++) w.string(1, this.pluginTypes[i]);
    if (this.name.length > 0) w.string(2, this.name);
    if (this.version.length > 0) w.string(3, this.version);
    return w.finish();
  }
}

// A handler: one method per call from the host, each returning OK, reject(reason) or
// fail(reason). validate is called first; register after a successful validate; deregister for
// a plugin that was registered.
export abstract class Handler {
  abstract validate(p: Plugin): i32;
  abstract register(p: Plugin): i32;
  abstract deregister(p: Plugin): i32;
}

let theHandler: Handler | null = null;
let theManifest: Manifest | null = null;

// handle sets the module's manifest and handler. Call it once, at the top level of the entry
// file: it runs when the module is instantiated, before the host reads the manifest.
export function handle(m: Manifest, h: Handler): void {
  theManifest = m;
  theHandler = h;
}

// The UTF-8 bytes of s.
export function utf8(s: string): Uint8Array {
  return Uint8Array.wrap(String.UTF8.encode(s));
}

function setResult(status: i32, reason: string): i32 {
  let b = utf8(reason);
  let n = b.length;
  if (n > MAX_RESULT_BYTES) { // cut, without splitting a UTF-8 sequence
    n = MAX_RESULT_BYTES;
    while (n > 0 && (b[n] & 0xc0) == 0x80) n--;
  }
  host_result_set(b.dataStart, <u32>n);
  return status;
}

// reject refuses the plugin, which is told the reason; the host asks again only when
// something that could change the answer changes. Return what it returns.
export function reject(reason: string): i32 {
  return setResult(REJECTED, reason);
}

// fail says the handler failed, with a reason; the host retries later with backoff.
export function fail(reason: string): i32 {
  return setResult(ERROR, reason);
}

// codeText names a host function's code: "too large", "denied", ...
export function codeText(code: i32): string {
  switch (code) {
    case NOT_FOUND: return "not found";
    case TOO_LARGE: return "too large";
    case DENIED: return "denied";
    case FAILED: return "failed";
    case BAD_REQUEST: return "bad request";
    case CONFLICT: return "conflict";
  }
  return code >= 0 ? "ok" : "unknown host code";
}

// failCode fails the call with a reason naming the host function, the key and the code:
// "kv_set plugin/demo: too large".
export function failCode(fn: string, key: string, code: i32): i32 {
  let s = fn;
  if (key.length > 0) s += " " + key;
  s += ": " + codeText(code);
  const why = errorReason();
  if (why.length > 0) s += ": " + why;
  return fail(s);
}

// log writes a line to the daemon's log, at a level (LOG_*); lines are cut at
// MAX_LOG_LINE_BYTES.
export function log(level: i32, msg: string): void {
  const b = utf8(msg);
  host_log(level, b.dataStart, <u32>min(b.length, MAX_LOG_LINE_BYTES));
}

// publish publishes a key and value about the plugin being registered (only in register).
// Returns OK or a negative code.
export function publish(key: string, value: string): i32 {
  const k = utf8(key), v = utf8(value);
  return host_publish(k.dataStart, k.length, v.dataStart, v.length);
}

// A value read from the host: code is OK (found), NOT_FOUND, or another negative code.
export class Got {
  constructor(public code: i32, public bytes: Uint8Array) {}

  get found(): bool {
    return this.code == OK;
  }

  // The value as a string (UTF-8).
  text(): string {
    return String.UTF8.decodeUnsafe(this.bytes.dataStart, <usize>this.bytes.length);
  }
}

// kvGet reads a key of the store of the plugin type of the current call, which every instance
// of the module shares and which outlives them.
export function kvGet(key: string): Got {
  const k = utf8(key);
  let buf = new Uint8Array(256);
  // The value may change size between two reads when another instance sets it: try a few
  // times with a buffer of the size last reported.
  for (let i = 0; i < 4; i++) {
    const n = host_kv_get(k.dataStart, k.length, buf.dataStart, buf.length);
    if (n < 0) return new Got(n, new Uint8Array(0));
    if (n <= buf.length) return new Got(OK, buf.subarray(0, n));
    buf = new Uint8Array(n);
  }
  return new Got(FAILED, new Uint8Array(0));
}

// kvSet sets key to value (a string, as UTF-8; kvSetBytes for bytes).
export function kvSet(key: string, value: string): i32 {
  return kvSetBytes(key, utf8(value));
}

export function kvSetBytes(key: string, value: Uint8Array): i32 {
  const k = utf8(key);
  return host_kv_set(k.dataStart, k.length, value.dataStart, value.length);
}

// kvDelete deletes key; deleting a key that does not exist is OK.
export function kvDelete(key: string): i32 {
  const k = utf8(key);
  return host_kv_delete(k.dataStart, k.length);
}

// kvCompareAndSet sets key to value if its value is still old, atomically (ABI v1.1). old
// null: only if the key does not exist; value null: delete it. Returns OK, CONFLICT (nothing
// changed: read again and decide again) or another negative code.
export function kvCompareAndSet(key: string, old: Uint8Array | null, value: Uint8Array | null): i32 {
  const k = utf8(key);
  const op: usize = old === null ? 0 : old.dataStart;
  const ol: i32 = old === null ? -1 : old.length;
  const vp: usize = value === null ? 0 : value.dataStart;
  const vl: i32 = value === null ? -1 : value.length;
  return host_kv_compare_and_set(k.dataStart, k.length, op, ol, vp, vl);
}

// pluginCall calls method ("/package.Service/Method") on the endpoint of the plugin being
// handled, with req an encoded request message. It needs the plugin_call capability, granted
// by the operator: a module that calls it imports plugin_call and loads only with the grant.
// For FAILED, errorReason() has the host's reason.
export function pluginCall(method: string, req: Uint8Array): Got {
  const m = utf8(method);
  let resp = new Uint8Array(64 << 10);
  for (let i = 0; i < 2; i++) {
    const n = host_plugin_call(m.dataStart, m.length, req.dataStart, req.length, resp.dataStart, resp.length);
    if (n < 0) return new Got(n, new Uint8Array(0));
    if (n <= resp.length) return new Got(OK, resp.subarray(0, n));
    resp = new Uint8Array(n);
  }
  return new Got(FAILED, new Uint8Array(0));
}

// errorReason is the host's reason for the last host function that failed in this call
// (error_read), or "".
export function errorReason(): string {
  const n = host_error_read(0, 0);
  if (n <= 0) return "";
  const buf = new Uint8Array(n);
  const m = host_error_read(buf.dataStart, buf.length);
  if (m < 0 || m > n) return "";
  return String.UTF8.decodeUnsafe(buf.dataStart, <usize>m);
}

// validUTF8 says whether b is valid UTF-8 (a protobuf string must be).
export function validUTF8(b: Uint8Array): bool {
  let i = 0;
  const end = b.length;
  while (i < end) {
    const c = <u32>b[i];
    let n = 0, min: u32 = 0, cp: u32 = 0;
    if (c < 0x80) { i++; continue; }
    else if ((c & 0xe0) == 0xc0) { n = 2; min = 0x80; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { n = 3; min = 0x800; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { n = 4; min = 0x10000; cp = c & 0x07; }
    else return false;
    if (end - i < n) return false;
    for (let j = 1; j < n; j++) {
      const d = <u32>b[i + j];
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

// The protocol buffers wire format (as abi/wire), for the ABI's messages and those of plugin
// calls.
export const WIRE_VARINT: i32 = 0;
export const WIRE_FIXED64: i32 = 1;
export const WIRE_BYTES: i32 = 2;
export const WIRE_FIXED32: i32 = 5;

// Writer builds a message.
export class Writer {
  private buf: Uint8Array = new Uint8Array(64);
  private len: i32 = 0;

  private grow(more: i32): void {
    if (this.len + more <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + more) cap *= 2;
    const b = new Uint8Array(cap);
    b.set(this.buf.subarray(0, this.len));
    this.buf = b;
  }

  byte(v: u8): void {
    this.grow(1);
    this.buf[this.len++] = v;
  }

  varint(v: u64): void {
    while (v >= 0x80) {
      this.byte(<u8>(v | 0x80));
      v >>= 7;
    }
    this.byte(<u8>v);
  }

  tag(num: u32, wireType: i32): void {
    this.varint((<u64>num << 3) | <u64>(wireType & 7));
  }

  // A length-delimited field: bytes, or a message encoded beforehand.
  bytes(num: u32, v: Uint8Array): void {
    this.tag(num, WIRE_BYTES);
    this.varint(<u64>v.length);
    this.grow(v.length);
    this.buf.set(v, this.len);
    this.len += v.length;
  }

  // A string field (proto3 leaves out an empty singular string: skip it yourself).
  string(num: u32, s: string): void {
    this.bytes(num, utf8(s));
  }

  uint(num: u32, v: u64): void {
    this.tag(num, WIRE_VARINT);
    this.varint(v);
  }

  finish(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

// Reader walks the fields of a message: while (r.next()) { r.num, r.wireType, r.varint,
// r.data } then check r.err ("" when the message was well formed).
export class Reader {
  private pos: i32 = 0;
  num: u32 = 0;
  wireType: i32 = 0;
  varint: u64 = 0;
  data: Uint8Array = new Uint8Array(0);
  err: string = "";

  constructor(private buf: Uint8Array) {}

  private readVarint(): bool {
    let v: u64 = 0;
    for (let i = 0; i < 10 && this.pos + i < this.buf.length; i++) {
      const c = <u64>this.buf[this.pos + i];
      if (i == 9 && c > 1) return false;
      v |= (c & 0x7f) << (<u64>(7 * i));
      if (c < 0x80) {
        this.pos += i + 1;
        this.varint = v;
        return true;
      }
    }
    return false;
  }

  next(): bool {
    if (this.err.length > 0 || this.pos >= this.buf.length) return false;
    if (!this.readVarint() || (this.varint >> 3) == 0 || (this.varint >> 3) > 0x7fffffff) {
      this.err = "bad field tag";
      return false;
    }
    this.num = <u32>(this.varint >> 3);
    this.wireType = <i32>(this.varint & 7);
    this.varint = 0;
    let n: i32 = 0;
    if (this.wireType == WIRE_VARINT) {
      if (!this.readVarint()) {
        this.err = "bad varint";
        return false;
      }
      this.data = new Uint8Array(0);
      return true;
    } else if (this.wireType == WIRE_FIXED64) {
      n = 8;
    } else if (this.wireType == WIRE_FIXED32) {
      n = 4;
    } else if (this.wireType == WIRE_BYTES) {
      if (!this.readVarint() || this.varint > <u64>(this.buf.length - this.pos)) {
        this.err = "truncated";
        return false;
      }
      n = <i32>this.varint;
      this.varint = 0;
    } else {
      this.err = "unsupported wire type";
      return false;
    }
    if (n > this.buf.length - this.pos) {
      this.err = "truncated";
      return false;
    }
    this.data = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return true;
  }
}

// decodeRequest decodes an encoded PluginRequest into p; it returns "" or what is malformed.
function decodeRequest(b: Uint8Array, p: Plugin): string {
  const r = new Reader(b);
  while (r.next()) {
    if (r.num > 5 || r.wireType != WIRE_BYTES) continue; // unknown: a later revision's field
    if (!validUTF8(r.data)) return "field " + r.num.toString() + ": not valid UTF-8";
    const s = String.UTF8.decodeUnsafe(r.data.dataStart, <usize>r.data.length);
    if (r.num == 1) p.socket = s;
    else if (r.num == 2) p.pluginType = s;
    else if (r.num == 3) p.name = s;
    else if (r.num == 4) p.endpoint = s;
    else p.versions.push(s);
  }
  return r.err;
}

const OP_VALIDATE = 0;
const OP_REGISTER = 1;
const OP_DEREGISTER = 2;

function serve(op: i32, requestLen: i32): i32 {
  const h = theHandler;
  if (h === null) return fail("wasmhost (AssemblyScript): handle() was not called at the top level of the entry file");
  if (requestLen < 0 || requestLen > MAX_REQUEST_BYTES) return fail("wasmhost (AssemblyScript): the request length is out of range");
  const buf = new Uint8Array(requestLen);
  if (host_request_read(buf.dataStart, buf.length) != requestLen) {
    return fail("wasmhost (AssemblyScript): request_read did not return the request length");
  }
  const p = new Plugin();
  const bad = decodeRequest(buf, p);
  if (bad.length > 0) return fail("wasmhost (AssemblyScript): decoding the request: malformed protobuf message: " + bad);
  if (op == OP_VALIDATE) return h.validate(p);
  if (op == OP_REGISTER) return h.register(p);
  return h.deregister(p);
}

// The exports of ABI v1: re-export them from the entry file.

export function wasmhost_abi_version(): i32 {
  return ABI_VERSION;
}

export function wasmhost_manifest(): i32 {
  const m = theManifest;
  if (m === null) return fail("wasmhost (AssemblyScript): handle() was not called at the top level of the entry file");
  if (m.pluginTypes.length == 0) return fail("wasmhost (AssemblyScript): the manifest names no plugin type");
  const b = m.encode();
  if (b.length > MAX_RESULT_BYTES) return fail("wasmhost (AssemblyScript): the encoded manifest is over MAX_RESULT_BYTES");
  host_result_set(b.dataStart, b.length);
  return OK;
}

export function wasmhost_validate(requestLen: i32): i32 {
  return serve(OP_VALIDATE, requestLen);
}

export function wasmhost_register(requestLen: i32): i32 {
  return serve(OP_REGISTER, requestLen);
}

export function wasmhost_deregister(requestLen: i32): i32 {
  return serve(OP_DEREGISTER, requestLen);
}

;; minimal.wat: the smallest complete wasmhost handler (ABI v1). It handles the plugin type
;; "example.wasmhost.dev/minimal", accepts every plugin, and logs a line when it registers one.
;; It imports two host functions and no WASI. Build: wat2wasm minimal.wat -o minimal.wasm
(module
  ;; Host functions, all in the module "wasmhost".
  (import "wasmhost" "result_set" (func $result_set (param $ptr i32) (param $len i32) (result i32)))
  (import "wasmhost" "log" (func $log (param $level i32) (param $ptr i32) (param $len i32)))

  ;; All data passes through this memory (one 64 KiB page).
  (memory (export "memory") 1)

  ;; The manifest, in the protocol buffers wire format (39 bytes):
  ;;   0a 1c "example.wasmhost.dev/minimal"   field 1 (plugin_types), 28 bytes
  ;;   12 07 "minimal"                        field 2 (name), 7 bytes
  (data (i32.const 0) "\0a\1cexample.wasmhost.dev/minimal\12\07minimal")
  ;; A log line (10 bytes).
  (data (i32.const 64) "registered")

  ;; The ABI version this module was written for.
  (func (export "wasmhost_abi_version") (result i32)
    (i32.const 1))

  ;; Set the result to the manifest; return StatusOK (0), or StatusError (2) if the host
  ;; refused the result.
  (func (export "wasmhost_manifest") (result i32)
    (if (result i32) (i32.eqz (call $result_set (i32.const 0) (i32.const 39)))
      (then (i32.const 0))
      (else (i32.const 2))))

  ;; Accept every plugin without reading the request.
  (func (export "wasmhost_validate") (param $request_len i32) (result i32)
    (i32.const 0))

  ;; Log at level 1 (info) and accept.
  (func (export "wasmhost_register") (param $request_len i32) (result i32)
    (call $log (i32.const 1) (i32.const 64) (i32.const 10))
    (i32.const 0))

  (func (export "wasmhost_deregister") (param $request_len i32) (result i32)
    (i32.const 0))
)

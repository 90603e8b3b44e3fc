;; reject.wat: a wasmhost handler (ABI v1) for the plugin type "example.wasmhost.dev/reject" that
;; refuses every plugin in validate, with a reason. It reads the request first, to show how:
;; the host passes the request's length, and the guest pulls the bytes into memory it chose.
;; Build: wat2wasm reject.wat -o reject.wasm
(module
  (import "wasmhost" "request_read" (func $request_read (param $ptr i32) (param $len i32) (result i32)))
  (import "wasmhost" "result_set" (func $result_set (param $ptr i32) (param $len i32) (result i32)))

  ;; Two pages: data below 1024, the request buffer from 1024 (at most 64 KiB, abi.MaxRequestBytes).
  (memory (export "memory") 2)

  ;; The manifest (37 bytes): 0a 1b "example.wasmhost.dev/reject" 12 06 "reject".
  (data (i32.const 0) "\0a\1bexample.wasmhost.dev/reject\12\06reject")
  ;; The reason (33 bytes).
  (data (i32.const 64) "this handler refuses every plugin")
  ;; Another reason (34 bytes).
  (data (i32.const 128) "the request did not fit the buffer")

  (func (export "wasmhost_abi_version") (result i32)
    (i32.const 1))

  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 37)))
    (i32.const 0))

  (func (export "wasmhost_validate") (param $request_len i32) (result i32)
    ;; Read the request into the buffer at 1024. request_read returns the full length of the
    ;; request; a larger value than the buffer means the copy was cut short. A real handler would
    ;; now decode the PluginRequest message; this one refuses the plugin whatever it says.
    (if (i32.gt_u (call $request_read (i32.const 1024) (i32.const 65536)) (i32.const 65536))
      (then
        (drop (call $result_set (i32.const 128) (i32.const 34)))
        (return (i32.const 2))))   ;; StatusError
    (drop (call $result_set (i32.const 64) (i32.const 33)))
    (i32.const 1))                 ;; StatusRejected

  (func (export "wasmhost_register") (param $request_len i32) (result i32)
    (i32.const 0))

  (func (export "wasmhost_deregister") (param $request_len i32) (result i32)
    (i32.const 0))
)

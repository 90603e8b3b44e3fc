;; Imports wasmhost.plugin_call. validate calls /svc/Big with "x" into a 256-byte buffer: when
;; the call returns CodeTooLarge (-2) it rejects with "too large: " and the reason read by
;; error_read; when it fails otherwise, it fails with the reason; when it succeeds, it rejects
;; with "ok".
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "error_read" (func $error_read (param i32 i32) (result i32)))
  (import "wasmhost" "plugin_call" (func $plugin_call (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0epcsize.example")
  (data (i32.const 100) "/svc/Big")
  (data (i32.const 120) "x")
  (data (i32.const 200) "too large: ")
  (data (i32.const 220) "ok")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 16)))
    (i32.const 0))
  (func $reason (param $at i32) (result i32) ;; error_read to $at, at most 1024 bytes: its length
    (local $n i32)
    (local.set $n (call $error_read (local.get $at) (i32.const 1024)))
    (select (local.get $n) (i32.const 1024) (i32.lt_u (local.get $n) (i32.const 1024))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (local $n i32)
    (local.set $n (call $plugin_call (i32.const 100) (i32.const 8) (i32.const 120) (i32.const 1) (i32.const 4096) (i32.const 256)))
    (if (i32.eq (local.get $n) (i32.const -2))
      (then
        (memory.copy (i32.const 2048) (i32.const 200) (i32.const 11))
        (drop (call $result_set (i32.const 2048) (i32.add (i32.const 11) (call $reason (i32.const 2059)))))
        (return (i32.const 1))))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then
        (drop (call $result_set (i32.const 2048) (call $reason (i32.const 2048))))
        (return (i32.const 2))))
    (drop (call $result_set (i32.const 220) (i32.const 2)))
    (i32.const 1))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

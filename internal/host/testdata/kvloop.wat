;; Types "kvloop.example" and "kvloop.nocapture" (one handler for a type captured and a type
;; opted out, handlers.types.<T>.capture: false). Hostile (issue 27): validate writes one
;; 60,000-byte value, then reads it with kv_get in a loop that never ends: the call ends at its
;; CPU budget or deadline. It reads into a 16-byte buffer, which costs the guest little, but a
;; recording of the call would keep the whole value per read: a captured call records what its
;; bounds allow and says what it left out (sandbox MaxRecordExchanges, MaxRecordBytes).
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "\0a\0ekvloop.example\0a\10kvloop.nocapture")
  (data (i32.const 100) "v")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 34)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (if (call $kv_set (i32.const 100) (i32.const 1) (i32.const 1024) (i32.const 60000))
      (then (return (i32.const 2))))
    (loop $read
      (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 65536) (i32.const 16)))
      (br $read))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

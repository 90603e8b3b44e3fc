;; A handler of type "conformance.example" for the conformance kit's own tests. The byte after
;; "MODE:" (offset 517) selects a behaviour; the tests patch it in a copy of handler.wasm:
;;   g  good: passes every check
;;   a  accepts every plugin, even those it should refuse
;;   r  refuses without a reason
;;   v  writes the store in validate
;;   t  traps in register
;;   n  register is not idempotent: fails when the plugin is recorded already
;;   m  keeps its state in memory, not in the store: deregister fails in a fresh instance
;;   l  deregister leaves its key in the store
;;   e  deregister fails for a plugin it has no record of
;; Validate refuses a plugin whose request ends in "0" (its last version, e.g. "v0"). Register
;; records the plugin under the whole request as key and publishes k=v; deregister deletes it.
(module
  (import "wasmhost" "request_read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "publish" (func $publish (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_delete" (func $kv_delete (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $flag (mut i32) (i32.const 0))
  ;; The manifest, 27 bytes: 0a 13 "conformance.example" 12 04 "good"
  (data (i32.const 0) "\0a\13conformance.example\12\04good")
  (data (i32.const 64) "kv1")
  (data (i32.const 80) "already registered")
  (data (i32.const 100) "not registered in this instance")
  (data (i32.const 140) "no record")
  (data (i32.const 160) "refused")
  (data (i32.const 512) "MODE:g")

  (func $mode (result i32) (i32.load8_u (i32.const 517)))
  (func $is (param $c i32) (result i32) (i32.eq (call $mode) (local.get $c)))
  ;; The request goes to offset 1024 (at most 1024 bytes).
  (func $read (param $len i32)
    (drop (call $request_read (i32.const 1024) (local.get $len))))
  (func $recorded (param $len i32) (result i32)
    (i32.ge_s (call $kv_get (i32.const 1024) (local.get $len) (i32.const 2048) (i32.const 16)) (i32.const 0)))

  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 27)))
    (i32.const 0))

  (func (export "wasmhost_validate") (param $len i32) (result i32)
    (call $read (local.get $len))
    (if (call $is (i32.const 0x76)) ;; v
      (then (drop (call $kv_set (i32.const 66) (i32.const 1) (i32.const 66) (i32.const 1)))))
    (if (i32.and (i32.eqz (call $is (i32.const 0x61))) ;; not a
                 (i32.eq (i32.load8_u (i32.add (i32.const 1023) (local.get $len))) (i32.const 0x30)))
      (then
        (if (i32.eqz (call $is (i32.const 0x72))) ;; not r
          (then (drop (call $result_set (i32.const 160) (i32.const 7)))))
        (return (i32.const 1))))
    (i32.const 0))

  (func (export "wasmhost_register") (param $len i32) (result i32)
    (call $read (local.get $len))
    (if (call $is (i32.const 0x74)) (then unreachable)) ;; t
    (if (i32.and (call $is (i32.const 0x6e)) (call $recorded (local.get $len))) ;; n
      (then
        (drop (call $result_set (i32.const 80) (i32.const 18)))
        (return (i32.const 2))))
    (global.set $flag (i32.const 1))
    (if (i32.eqz (call $is (i32.const 0x6d))) ;; not m
      (then (drop (call $kv_set (i32.const 1024) (local.get $len) (i32.const 66) (i32.const 1)))))
    (drop (call $publish (i32.const 64) (i32.const 1) (i32.const 65) (i32.const 1)))
    (i32.const 0))

  (func (export "wasmhost_deregister") (param $len i32) (result i32)
    (call $read (local.get $len))
    (if (i32.and (call $is (i32.const 0x6d)) (i32.eqz (global.get $flag))) ;; m
      (then
        (drop (call $result_set (i32.const 100) (i32.const 31)))
        (return (i32.const 2))))
    (if (i32.eqz (call $recorded (local.get $len)))
      (then
        (if (call $is (i32.const 0x65)) ;; e
          (then
            (drop (call $result_set (i32.const 140) (i32.const 9)))
            (return (i32.const 2))))
        (return (i32.const 0))))
    (if (i32.eqz (call $is (i32.const 0x6c))) ;; not l
      (then (drop (call $kv_delete (i32.const 1024) (local.get $len)))))
    (i32.const 0))
)

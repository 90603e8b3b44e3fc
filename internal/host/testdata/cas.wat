;; Type "cas.example" (ABI v1.1). validate checks kv_compare_and_set's codes: each check i
;; returns 10+i when its code is not the expected one (the host reports an unknown status).
;; Memory: 0 manifest, 100 key "k", 110 "v1", 120 "v2", 130 "xx", 1000 a 300-byte key.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_compare_and_set" (func $cas (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "\0a\0bcas.example")
  (data (i32.const 100) "k")
  (data (i32.const 110) "v1")
  (data (i32.const 120) "v2")
  (data (i32.const 130) "xx")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 13)))
    (i32.const 0))
  (func $expect (param $got i32) (param $want i32) (param $check i32) (result i32)
    (if (result i32) (i32.eq (local.get $got) (local.get $want))
      (then (i32.const 0)) (else (i32.add (i32.const 10) (local.get $check)))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (local $r i32)
    ;; 1: absent -> v1 creates it
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 0) (i32.const -1) (i32.const 110) (i32.const 2)) (i32.const 0) (i32.const 1)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 2: absent -> v2 conflicts: it exists
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 0) (i32.const -1) (i32.const 120) (i32.const 2)) (i32.const -6) (i32.const 2)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 3: xx -> v2 conflicts: it is v1
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 130) (i32.const 2) (i32.const 120) (i32.const 2)) (i32.const -6) (i32.const 3)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 4: v1 -> v2 swaps
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 110) (i32.const 2) (i32.const 120) (i32.const 2)) (i32.const 0) (i32.const 4)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 5: kv_get reads v2 (2 bytes; the first is 'v', the second '2')
    (local.set $r (call $expect (call $kv_get (i32.const 100) (i32.const 1) (i32.const 2000) (i32.const 8)) (i32.const 2) (i32.const 5)))
    (if (local.get $r) (then (return (local.get $r))))
    (local.set $r (call $expect (i32.load8_u (i32.const 2001)) (i32.const 50) (i32.const 5)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 6: v2 -> deleted
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 120) (i32.const 2) (i32.const 0) (i32.const -1)) (i32.const 0) (i32.const 6)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 7: gone
    (local.set $r (call $expect (call $kv_get (i32.const 100) (i32.const 1) (i32.const 2000) (i32.const 8)) (i32.const -1) (i32.const 7)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 8: an old length below -1 is a bad request
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 0) (i32.const -2) (i32.const 110) (i32.const 2)) (i32.const -5) (i32.const 8)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 9: an empty key is a bad request
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 0) (i32.const 0) (i32.const -1) (i32.const 110) (i32.const 2)) (i32.const -5) (i32.const 9)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 10: a key over 512 bytes is too large
    (local.set $r (call $expect (call $cas (i32.const 1000) (i32.const 513) (i32.const 0) (i32.const -1) (i32.const 110) (i32.const 2)) (i32.const -2) (i32.const 10)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 11: a new value over 64 KiB is too large
    (local.set $r (call $expect (call $cas (i32.const 100) (i32.const 1) (i32.const 0) (i32.const -1) (i32.const 0) (i32.const 65537)) (i32.const -2) (i32.const 11)))
    (if (local.get $r) (then (return (local.get $r))))
    ;; 12: a 300-byte key (a prefix and a long plugin name) fits now; an empty value is a value
    (local.set $r (call $expect (call $cas (i32.const 1000) (i32.const 300) (i32.const 0) (i32.const -1) (i32.const 110) (i32.const 0)) (i32.const 0) (i32.const 12)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $expect (call $cas (i32.const 1000) (i32.const 300) (i32.const 110) (i32.const 0) (i32.const 0) (i32.const -1)) (i32.const 0) (i32.const 13)))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

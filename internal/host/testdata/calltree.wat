;; Type "calltree.example". validate is a loop-free exponential call tree (the issue's 285-byte handler); register accepts.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\10calltree.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 18)))
    (i32.const 0))
  ;; f(n) = f(n-1) + f(n-1): 2^45 calls, 45 deep, no loop anywhere.
  (func $f (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (i32.add
        (call $f (i32.sub (local.get $n) (i32.const 1)))
        (call $f (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 45)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

;; Type "work.example". validate does a fixed amount of work and accepts: a call tree of 2^16
;; calls (function entries) and a loop of 100,000 iterations (loop heads), for measuring what
;; the host's ticks cost guest code that runs flat out.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0cwork.example")
  (func $f (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (i32.add
        (call $f (i32.sub (local.get $n) (i32.const 1)))
        (call $f (i32.sub (local.get $n) (i32.const 1)))))))
  (func $loop (param $n i32) (result i32)
    (local $acc i32)
    (loop $more
      (local.set $acc (i32.add (i32.mul (local.get $acc) (i32.const 31)) (local.get $n)))
      (br_if $more (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (local.get $acc))
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 16)))
    (drop (call $loop (i32.const 100000)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

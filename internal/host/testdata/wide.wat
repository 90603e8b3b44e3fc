;; Type "wide.example". validate recurses without end, each frame holding 1,000 live values; register accepts.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0cwide.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 14)))
    (i32.const 0))
  ;; Each frame keeps 1,000 values on its operand stack across the call to itself: a frame
  ;; far wider than its one parameter says.
  (func $f (param $n i32) (result i32)
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    local.get $n
    (call $f (i32.add (local.get $n) (i32.const 1)))
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add
    i32.add)
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 0)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))

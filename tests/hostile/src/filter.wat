;; A filter plugin, written by hand, that keeps every record, except that a
;; batch holding a record whose value starts with the trigger byte makes it
;; misbehave (the misdeed, filled in by lib.rs). The host retries a failed
;; batch one record at a time, so only the records that start with the
;; trigger fail.
(module
  (import "mailer:plugin/log@0.1.0" "log" (func $log (param i32 i32 i32)))
  {{COMMON}}
  (table $table 1 funcref)

  (func (export "filter-batch") (param $input i32) (param $len i32) (result i32)
    (local $n i32) (local $out i32) (local $i i32)
    (if (call $offends (local.get $input))
      (then {{MISDEED}}))
    ;; count:u32, then `0 1` (kept) per record
    (local.set $n (i32.load (local.get $input)))
    (local.set $out (call $alloc (i32.add (i32.const 4) (i32.shl (local.get $n) (i32.const 1))) (i32.const 4)))
    (i32.store (local.get $out) (local.get $n))
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store16
          (i32.add (i32.add (local.get $out) (i32.const 4)) (i32.shl (local.get $i) (i32.const 1)))
          (i32.const 0x0100))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.store (i32.const 0) (local.get $out))
    (i32.store (i32.const 4) (i32.add (i32.const 4) (i32.shl (local.get $n) (i32.const 1))))
    (i32.const 0))

  ;; The host has copied the output: the next call starts with an empty heap.
  (func (export "cabi_post_filter-batch") (param i32)
    (global.set $heap (i32.const 1024)))

  ;; The per-record export (the host calls the batch one).
  (func (export "filter") (param i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
    unreachable)
)

;; What every raw hostile component shares: a memory with a bump allocator,
;; `cabi_realloc`, and `$offends`, which tells whether a batch holds a record
;; whose value starts with the trigger byte. lib.rs puts it into each
;; world's module after its imports.
  (memory (export "memory") 1)
  ;; 0..8: the return area; 16..: a message; HEAP..: the bump allocator.
  (data (i32.const 16) "hostile")
  (global $heap (mut i32) (i32.const 1024))

  ;; Grows memory so that [0, end) is in it, or traps.
  (func $reserve (param $end i32)
    (local $pages i32)
    (local.set $pages
      (i32.sub
        (i32.shr_u (i32.add (local.get $end) (i32.const 65535)) (i32.const 16))
        (memory.size)))
    (if (i32.gt_s (local.get $pages) (i32.const 0))
      (then
        (if (i32.eq (memory.grow (local.get $pages)) (i32.const -1))
          (then unreachable)))))

  (func $alloc (param $size i32) (param $align i32) (result i32)
    (local $at i32)
    (local.set $at
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $at) (local.get $size)))
    (call $reserve (global.get $heap))
    (local.get $at))

  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (call $alloc (local.get 3) (local.get 2)))

  ;; Whether a record of the batch at $p starts its value with the trigger.
  ;; batch := count:u32 record*; record := flags:u8 [key_len:u32 key]
  ;; value_len:u32 value timestamp:i64 header_count:u32 (len:u32 bytes len:u32 bytes)*
  (func $offends (param $p i32) (result i32)
    (local $n i32) (local $len i32) (local $h i32)
    (local.set $n (i32.load (local.get $p)))
    (local.set $p (i32.add (local.get $p) (i32.const 4)))
    (block $done
      (loop $record
        (br_if $done (i32.eqz (local.get $n)))
        (if (i32.and (i32.load8_u (local.get $p)) (i32.const 1))
          (then
            (local.set $p
              (i32.add (i32.add (local.get $p) (i32.const 5))
                       (i32.load offset=1 (local.get $p)))))
          (else (local.set $p (i32.add (local.get $p) (i32.const 1)))))
        (local.set $len (i32.load (local.get $p)))
        (if (i32.and (i32.ne (local.get $len) (i32.const 0))
                     (i32.eq (i32.load8_u offset=4 (local.get $p)) (i32.const {{TRIGGER}})))
          (then (return (i32.const 1))))
        (local.set $p (i32.add (i32.add (local.get $p) (i32.const 12)) (local.get $len)))
        (local.set $h (i32.load (local.get $p)))
        (local.set $p (i32.add (local.get $p) (i32.const 4)))
        (block $headers_done
          (loop $header
            (br_if $headers_done (i32.eqz (local.get $h)))
            (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
            (local.set $p (i32.add (i32.add (local.get $p) (i32.const 4)) (i32.load (local.get $p))))
            (local.set $h (i32.sub (local.get $h) (i32.const 1)))
            (br $header)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $record)))
    (i32.const 0))


//! The COM1 serial console (16550 at port 0x3f8) and `print!`.

use core::fmt::{self, Write};

use spin::Mutex;

use crate::arch::{inb, outb};

const COM1: u16 = 0x3f8;

/// Sets 115200 baud, 8N1, FIFOs on.
pub fn init() {
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x80);
    outb(COM1, 0x01);
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03);
    outb(COM1 + 2, 0xc7);
    outb(COM1 + 4, 0x03);
}

struct Port;

impl Write for Port {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            while inb(COM1 + 5) & 0x20 == 0 {
                core::hint::spin_loop();
            }
            outb(COM1, b);
        }
        Ok(())
    }
}

static LOCK: Mutex<()> = Mutex::new(());

#[doc(hidden)]
pub fn print(args: fmt::Arguments<'_>) {
    let _g = LOCK.lock();
    // Port::write_str never fails.
    let _ = Port.write_fmt(args);
}

/// Writes to the serial console without taking its lock (the panic path).
pub fn print_unlocked(args: fmt::Arguments<'_>) {
    let _ = Port.write_fmt(args);
}

/// Prints to the serial console.
#[macro_export]
macro_rules! print {
    ($($t:tt)*) => { $crate::serial::print(format_args!($($t)*)) };
}

/// Prints a line to the serial console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($t:tt)*) => { $crate::serial::print(format_args!("{}\n", format_args!($($t)*))) };
}

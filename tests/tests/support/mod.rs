pub mod pty;

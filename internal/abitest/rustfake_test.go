package abitest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/guestbuild"
)

// runRustTests runs a test program built by guestbuild.RustTest, and fails t unless every test
// in it passed.
func runRustTests(t *testing.T, bin string) {
	t.Helper()
	cmd := exec.Command(bin, "--test-threads=2")
	cmd.Env = append(cmd.Environ(), "RUST_BACKTRACE=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\ntest result: ok.") {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	t.Logf("%s", out)
}

// TestRustFakeHost builds testdata/rustfake/fake_test.rs natively with the Rust SDK, whose host
// functions are then its fake host (abi/rust/src/fake.rs), and runs its tests: the fake encodes
// the request as the daemon does, keeps a store per plugin type, answers each host function
// with the daemon's codes and reasons (the ABI's limits and the daemon's default ones, the
// handler's store quotas over every type's store, compare-and-set, publish only in register
// and kept only when register succeeds, plugin_call answered once from the test's function,
// denied without one), ends a call over its log or plugin call budget with the daemon's error,
// says "(no reason given)" for a failure without one, ends a call its handler panics in, and
// keeps one state per thread.
func TestRustFakeHost(t *testing.T) {
	runRustTests(t, guestbuild.RustTest(t, "internal/abitest/testdata/rustfake/fake_test.rs"))
}

// TestRustFakeExample builds the Rust example handler's unit tests (the tests module of
// examples/handler-rust/example.rs) natively against the fake host and runs them, as the Rust
// walkthrough does.
func TestRustFakeExample(t *testing.T) {
	bin := guestbuild.RustTest(t, "examples/handler-rust/example.rs")
	runRustTests(t, bin)
	// The module's tests ran, not none.
	out, err := exec.Command(bin, "--list").Output()
	if err != nil || strings.Count(string(out), ": test\n") < 4 {
		t.Fatalf("%s --list: %v\n%s", bin, err, out)
	}
}

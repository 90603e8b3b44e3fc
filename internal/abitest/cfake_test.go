package abitest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/guestbuild"
)

// TestCFakeHost builds testdata/cfake/cfake_test.c natively with the C SDK and its fake host
// (abi/c/wasmhost_fake.h), and runs it: the fake encodes the request as the daemon does,
// keeps a store per plugin type, answers each host function with the daemon's codes and
// reasons (the store's limits and the handler's store quotas over every type's store,
// compare-and-set, publish only in register, within its limits, and kept only when register
// succeeds, plugin_call from the test's function, error_read), ends a call over its log or
// plugin call budget with the daemon's error, and says "(no reason given)", as the daemon
// does, for a failure without one.
func TestCFakeHost(t *testing.T) {
	bin := guestbuild.Native(t, "internal/abitest/testdata/cfake/cfake_test.c")
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "PASS: ") {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	t.Logf("%s", out)
}

// TestCFakeExample builds the C example handler's unit tests (examples/handler-c/example_test.c)
// natively against the fake host and runs them, as the C walkthrough does.
func TestCFakeExample(t *testing.T) {
	bin := guestbuild.Native(t, "examples/handler-c/example_test.c", "handlers-wasm/example/example.c")
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "PASS: ") {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
}

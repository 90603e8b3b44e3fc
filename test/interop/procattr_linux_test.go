package interop

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the daemon if the test binary dies without stopping it
// (a panic, a timeout), so that no daemon outlives its test run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

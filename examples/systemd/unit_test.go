// Package systemd holds the systemd unit example; its test checks the unit's hardening.
package systemd

import (
	"os/exec"
	"regexp"
	"testing"
)

// TestUnitHardened: systemd-analyze rates the unit's exposure OK or better, as its comment
// says. Skipped where systemd-analyze is not installed.
func TestUnitHardened(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	cmd := exec.Command(sa, "security", "--offline=true", "wasmhost.service")
	out, _ := cmd.CombinedOutput() // it exits non-zero above its threshold; the rating says
	m := regexp.MustCompile(`Overall exposure level for wasmhost\.service: ([0-9.]+) (\w+)`).FindSubmatch(out)
	if m == nil {
		t.Skipf("systemd-analyze gave no rating (an old version without --offline?):\n%s", out)
	}
	if level := string(m[2]); level != "OK" && level != "SAFE" {
		t.Errorf("exposure %s %s, want OK or SAFE:\n%s", m[1], level, out)
	}
}

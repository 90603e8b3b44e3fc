package daemon

import (
	"reflect"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
)

// TestConfigDefaultsAreTheHosts: a limit has one default. What `wasmhost config defaults`
// prints for handlers.limits, handlers.quarantine and the sandbox's keys, turned into the
// host's settings as the daemon turns them, is what the host would take by itself; and every
// field of host.Limits comes from a key but the two that are constants.
func TestConfigDefaultsAreTheHosts(t *testing.T) {
	d := config.Default()
	got := hostLimits(d.Handlers.Limits)
	want := host.DefaultLimits
	constants := map[string]bool{"MaxAbandonedCompiles": true, "MaxNestingWork": true}
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		switch {
		case constants[name]:
			if !gv.Field(i).IsZero() {
				t.Errorf("host.Limits.%s is a constant (the host's default), but the daemon sets it to %v", name, gv.Field(i))
			}
		case gv.Field(i).IsZero() && !wv.Field(i).IsZero():
			// (Both zero: a default the host works out where it runs, such as GuestThreads.)
			t.Errorf("host.Limits.%s is set from no key of handlers.limits", name)
		case !gv.Field(i).Equal(wv.Field(i)):
			t.Errorf("host.Limits.%s: the config's default gives %v, the host's default is %v", name, gv.Field(i), wv.Field(i))
		}
	}
	if got := hostQuarantine(d.Handlers.Quarantine); got != host.DefaultQuarantine {
		t.Errorf("handlers.quarantine's defaults give %+v, the host's are %+v", got, host.DefaultQuarantine)
	}
	for _, c := range []struct {
		key       string
		got, want any
	}{
		{"handlerDir", d.HandlerDir, host.DefaultHandlerDir},
		{"handlers.callTimeout", time.Duration(d.Handlers.CallTimeout), host.DefaultCallTimeout},
		{"handlers.memoryLimit", int64(d.Handlers.MemoryLimit), int64(host.DefaultMemoryLimit)},
		{"handlers.removalGrace", time.Duration(d.Handlers.RemovalGrace), host.DefaultRemovalGrace},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v, the host's default is %v", c.key, c.got, c.want)
		}
	}
}

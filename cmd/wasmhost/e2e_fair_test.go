package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// A plugin type whose handler never returns (it loops until its deadline, here an hour) holds
// only its own slots (reconciler.maxPerType): with more of its plugins pending than the daemon
// runs operations at once, a plugin of another type still registers, and the slow type's
// plugins register once their handler answers.
func TestE2ESlowTypeDoesNotStarveOtherTypes(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	cfg := e2eConfig(dirs)
	cfg.Handlers.CallTimeout = config.Duration(time.Hour)
	cfg.Reconciler.MaxConcurrent = 8
	cfg.Reconciler.MaxPerType = 2
	const slowType, fastType = "slow.wasmhost.dev", "fast.wasmhost.dev"
	slow := registrationtest.NewRecordingHandler()
	answer := make(chan struct{})
	slow.SetHook(func(ctx context.Context, c registrationtest.Call) error {
		select {
		case <-answer:
		case <-ctx.Done():
		}
		return nil
	})
	fast := registrationtest.NewRecordingHandler()
	startDaemon(t, cfg, testLog(t), func(d *daemon.Daemon) {
		d.SetHandler(slowType, slow)
		d.SetHandler(fastType, fast)
	})

	var slowPlugins []*registrationtest.Plugin
	for i := range 20 {
		sock := filepath.Join(dirs.Socket, fmt.Sprintf("slow%02d.sock", i))
		slowPlugins = append(slowPlugins, registrationtest.Serve(t, sock, pluginInfo(slowType, fmt.Sprintf("slow%02d", i)), registrationtest.Options{}))
	}
	slow.WaitCalls(t, registrationtest.MethodValidate, 2, e2eWait)

	p := registrationtest.Serve(t, filepath.Join(dirs.Socket, "fast.sock"), pluginInfo(fastType, "fast"), registrationtest.Options{})
	wantNotification(t, p, true, "")
	if n := len(slow.CallsTo(registrationtest.MethodValidate)); n != 2 {
		t.Errorf("%d ValidatePlugin calls of the slow type in flight, want its 2 slots' worth", n)
	}

	close(answer)
	for _, sp := range slowPlugins {
		wantNotification(t, sp, true, "")
	}
}

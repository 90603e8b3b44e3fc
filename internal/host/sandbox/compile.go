package sandbox

import (
	"context"
	"time"

	"github.com/tetratelabs/wazero"
)

// Compiling is bounded twice. wasmbin.Check refuses, before compiling, the code that makes
// wazero's compiler slow (blocks nested thousands deep, huge functions, millions of locals);
// that is the bound that holds, since wazero cannot interrupt a compile. Behind it, compile
// gives up waiting after Limits.CompileTimeout: the file is refused and its load slot freed at
// once, while the compile, which cannot be stopped, runs on in the background and is thrown
// away when it ends. Such abandoned compiles are counted (AbandonedCompiles), and while
// maxAbandonedCompiles of them run, no new compile starts: the file is refused for now
// (RefusedCompileBusy) and tried again a second later. Compiles already running when the limit
// was reached may still be abandoned, so at most maxAbandonedCompiles plus the loads running at
// once (NumCPU) can run on; the structural limits keep each of them short. A compile
// in a child process would bound memory too, but costs a process and the cache sharing per
// load; the structural limits keep the compiler's memory near the size of the module.

// maxAbandonedCompiles is how many abandoned compiles may still be running before no new one
// starts. A constant (it was the key handlers.limits.maxAbandonedCompiles; docs/configuration.md,
// "Constants"): more would only let a hostile file take more cores.
const maxAbandonedCompiles = 1

// compile compiles bin in rt within Limits.CompileTimeout. When it gives up, abandoned is true
// and rt belongs to the abandoned compile, which closes it and then calls release.
func (sb *Sandbox) compile(rt wazero.Runtime, release func(), file string, bin []byte) (_ wazero.CompiledModule, abandoned bool, _ error) {
	sb.compileMu.Lock()
	if sb.abandoned >= maxAbandonedCompiles {
		n := sb.abandoned
		sb.compileMu.Unlock()
		return nil, false, refuse(file, RefusedCompileBusy, nil,
			"not compiled for now: %d abandoned compiles of other files are still running (their bound is a constant: docs/configuration.md, \"Constants\"); it is tried again at the next re-scan", n)
	}
	sb.compileMu.Unlock()

	type result struct {
		cm  wazero.CompiledModule
		err error
	}
	done := make(chan result, 1)
	t0 := time.Now()
	sb.sums.verify() // before wazero may read an entry of the cache
	go func() {
		// The context is not what stops it: nothing does. It must not be canceled under it.
		cm, err := rt.CompileModule(context.Background(), bin)
		done <- result{cm, err}
	}()
	timer := time.NewTimer(time.Duration(sb.cfg.Limits.CompileTimeout))
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, false, refuse(file, RefusedInvalid, nil, "module not valid WebAssembly: %v", r.err)
		}
		sb.sums.record()
		return r.cm, false, nil
	case <-timer.C:
	}
	sb.compileMu.Lock()
	sb.abandoned++
	sb.abandonedTotal++
	sb.compileMu.Unlock()
	sb.log.Error("handler compile abandoned; it runs on in the background and is thrown away when it ends",
		"handler", file, "compile_timeout", time.Duration(sb.cfg.Limits.CompileTimeout))
	go func() {
		<-done
		_ = rt.Close(context.Background())
		release()
		sb.log.Warn("abandoned handler compile ended", "handler", file, "after", time.Since(t0).Round(time.Millisecond))
		sb.compileMu.Lock()
		sb.abandoned--
		closeCache := sb.abandoned == 0 && sb.cacheClosePending
		sb.cacheClosePending = sb.cacheClosePending && !closeCache
		sb.compileMu.Unlock()
		if closeCache {
			_ = sb.cache.Close(context.Background())
		}
	}()
	return nil, true, refuse(file, RefusedCompileTimeout, nil,
		"compile did not finish within %v (handlers.limits.compileTimeout); abandoned", time.Duration(sb.cfg.Limits.CompileTimeout))
}

// AbandonedCompiles returns how many compiles were abandoned at their deadline and are still
// running, and how many were abandoned since the host was made.
func (sb *Sandbox) AbandonedCompiles() (running int, total uint64) {
	sb.compileMu.Lock()
	defer sb.compileMu.Unlock()
	return sb.abandoned, sb.abandonedTotal
}

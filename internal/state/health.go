package state

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Where a handler comes from (Handler.Source).
const (
	SourceFile     = "file"     // a file of the handler directory
	SourceRegistry = "registry" // a module of handlers.sources
)

// ReasonPending is Handler.Reason for a source not pulled yet.
const ReasonPending = "pending"

// Health is what serves and what does not: the handler files and sources that serve nothing,
// and the plugin types whose plugins wait for a handler.
type Health struct {
	// Serving counts the handlers that serve; NotServing lists the handler files and sources
	// that serve nothing (refused, not pulled yet), a file gone from the directory excepted.
	Serving    int
	NotServing []Handler
	// Waiting are the plugin types with plugins waiting for a handler, sorted by type.
	Waiting []TypeWaiting
	// KubeletRefused and KubeletTimeout count the plugins of forwarded types whose socket
	// exists and that the kubelet refused, or did not answer (kubelet.go).
	KubeletRefused, KubeletTimeout int
}

// TypeWaiting is a plugin type without a handler, and how many of its plugins wait for one.
type TypeWaiting struct {
	PluginType string
	Plugins    int
}

// Health reads what serves and what does not.
func (s *Store) Health() Health {
	return HealthOf(s.Handlers(), s.Plugins())
}

// HealthOf is Health over lists read before.
func HealthOf(hs []Handler, ps []PluginView) Health {
	var h Health
	for _, x := range hs {
		switch {
		case x.Serving || x.Source == "": // a built-in handler serves from the start
			h.Serving++
		case x.GoneSince.IsZero():
			h.NotServing = append(h.NotServing, x)
		}
	}
	waiting := map[string]int{}
	for _, p := range ps {
		if p.State == StateWaitingForHandler && p.Desired {
			waiting[p.PluginType]++
		}
		if p.Desired {
			switch p.Kubelet.State {
			case KubeletRefused:
				h.KubeletRefused++
			case KubeletTimeout:
				h.KubeletTimeout++
			}
		}
	}
	for t, n := range waiting {
		h.Waiting = append(h.Waiting, TypeWaiting{PluginType: t, Plugins: n})
	}
	slices.SortFunc(h.Waiting, func(a, b TypeWaiting) int { return strings.Compare(a.PluginType, b.PluginType) })
	return h
}

// maxHealthItems bounds the items one line of Lines names.
const maxHealthItems = 5

// Lines says what does not serve, one line per kind of problem, for an operator
// (`wasmhost status`, /readyz); none when everything serves.
func (h Health) Lines() []string {
	var out []string
	if n := len(h.NotServing); n > 0 {
		var items []string
		for _, x := range h.NotServing[:min(n, maxHealthItems)] {
			name := x.File
			if x.Source == SourceFile {
				name = filepath.Base(x.File)
			}
			if x.Reason != "" {
				name += " (" + x.Reason + ")"
			}
			items = append(items, name)
		}
		if n > maxHealthItems {
			items = append(items, fmt.Sprintf("and %d more", n-maxHealthItems))
		}
		out = append(out, fmt.Sprintf("%d handler %s not serving: %s", n, plural(n, "source or file", "sources or files"), strings.Join(items, ", ")))
	}
	for i, w := range h.Waiting {
		if i == maxHealthItems {
			out = append(out, fmt.Sprintf("and %d more plugin types without a handler", len(h.Waiting)-maxHealthItems))
			break
		}
		t := w.PluginType
		if t == "" {
			t = "(unknown)"
		}
		out = append(out, fmt.Sprintf("no handler for type %s while %d %s", t, w.Plugins, plural(w.Plugins, "plugin waits", "plugins wait")))
	}
	if n := h.KubeletTimeout; n > 0 {
		out = append(out, fmt.Sprintf("%d forwarded %s no answer from the kubelet: is it running, and is forward.kubeletDir its plugins_registry?", n, plural(n, "plugin got", "plugins got")))
	}
	if n := h.KubeletRefused; n > 0 {
		out = append(out, fmt.Sprintf("%d forwarded %s by the kubelet (wasmhost plugins, KUBELET, says why)", n, plural(n, "plugin refused", "plugins refused")))
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Package adminview is what the client commands show of a running daemon's admin API
// answers (admin/v1): the documents -o json and -o yaml print (stable keys in camelCase, states
// in the daemon's words, times in RFC 3339), and the tables and reports a person reads, with
// what plugins and handlers sent escaped by the one text policy (internal/safetext). It turns
// answers into output and nothing else: cmd/wasmhost asks the daemon (admin/client), parses
// the flags and writes what this package makes.
package adminview

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// Plugin is a plugin socket as -o json and -o yaml print it.
type Plugin struct {
	Socket         string            `json:"socket"`
	Type           string            `json:"type"`
	Name           string            `json:"name"`
	Endpoint       string            `json:"endpoint,omitempty"`
	Versions       []string          `json:"versions"`
	State          string            `json:"state"`
	LastError      string            `json:"lastError,omitempty"`
	Attempts       uint32            `json:"attempts"`
	NextRetry      *time.Time        `json:"nextRetry,omitempty"`
	LastTransition *time.Time        `json:"lastTransition,omitempty"`
	HandlerFile    string            `json:"handlerFile,omitempty"`
	HandlerSHA256  string            `json:"handlerSHA256,omitempty"`
	Published      map[string]string `json:"published,omitempty"`
	RegisteredAt   *time.Time        `json:"registeredAt,omitempty"`
	Kubelet        *Kubelet          `json:"kubelet,omitempty"`
	NotPublished   []string          `json:"notPublished,omitempty"`
}

// Kubelet is where a plugin of a forwarded type stands with the kubelet.
type Kubelet struct {
	State  string     `json:"state"`
	Error  string     `json:"error,omitempty"`
	Socket string     `json:"socket,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

func newKubelet(k *adminv1.KubeletStatus) *Kubelet {
	if k == nil {
		return nil
	}
	return &Kubelet{State: kubeletStateName(k.GetState()), Error: k.GetError(), Socket: k.GetSocket(), Since: timeOrNil(k.GetSince())}
}

// kubeletStateName is the daemon's name of a kubelet state: "pending", "registered", ...
func kubeletStateName(s adminv1.KubeletState) string {
	name, ok := strings.CutPrefix(s.String(), "KUBELET_STATE_")
	if !ok || s == adminv1.KubeletState_KUBELET_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(name)
}

// kubeletCell is the KUBELET column: -, pending, registered, refused: <the kubelet's text>, or
// timeout.
func kubeletCell(k *adminv1.KubeletStatus) string {
	if k == nil {
		return "-"
	}
	name := kubeletStateName(k.GetState())
	if k.GetState() == adminv1.KubeletState_KUBELET_STATE_REFUSED && k.GetError() != "" {
		return name + ": " + oneLine(k.GetError())
	}
	return name
}

// NewPlugin is the view of p.
func NewPlugin(p *adminv1.Plugin) Plugin {
	v := Plugin{
		Socket:         p.GetSocket(),
		Type:           p.GetType(),
		Name:           p.GetName(),
		Endpoint:       p.GetEndpoint(),
		Versions:       p.GetVersions(),
		State:          stateName(p.GetState()),
		LastError:      p.GetLastError(),
		Attempts:       p.GetAttempts(),
		NextRetry:      timeOrNil(p.GetNextRetry()),
		LastTransition: timeOrNil(p.GetLastTransition()),
		HandlerFile:    p.GetHandlerFile(),
		HandlerSHA256:  p.GetHandlerSha256(),
		Published:      p.GetPublished(),
		RegisteredAt:   timeOrNil(p.GetRegisteredAt()),
		Kubelet:        newKubelet(p.GetKubelet()),
		NotPublished:   p.GetNotPublished(),
	}
	if v.Versions == nil {
		v.Versions = []string{}
	}
	return v
}

// Plugins are the views of ps, in their order.
func Plugins(ps []*adminv1.Plugin) []Plugin {
	views := make([]Plugin, 0, len(ps))
	for _, p := range ps {
		views = append(views, NewPlugin(p))
	}
	return views
}

// stateName is the daemon's name of a state: "registered", "waiting-for-handler", ...
func stateName(s adminv1.PluginState) string {
	name, ok := strings.CutPrefix(s.String(), "PLUGIN_STATE_")
	if !ok || s == adminv1.PluginState_PLUGIN_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// WritePlugins prints ps as wasmhost plugins does: a table, with more columns when wide,
// states coloured when color; AGE and NEXT-RETRY are counted from now.
func WritePlugins(w io.Writer, ps []*adminv1.Plugin, wide, color bool, now time.Time) error {
	for _, p := range ps {
		SafeMessage(p)
	}
	tw := newTable()
	header := []string{"SOCKET", "TYPE", "NAME", Paint("STATE", noColor, color)}
	// The kubelet's verdict, when a plugin is forwarded to it (forward.types).
	forwarded := slices.ContainsFunc(ps, func(p *adminv1.Plugin) bool { return p.GetKubelet() != nil })
	if forwarded {
		header = append(header, "KUBELET")
	}
	header = append(header, "VERSIONS", "AGE")
	if wide {
		header = append(header, "ENDPOINT", "ATTEMPTS", "NEXT-RETRY", "HANDLER", "SHA256", "NOT-PUBLISHED")
	}
	header = append(header, "PUBLISHED", "LAST-ERROR")
	tw.row(header...)

	base := ""
	if !wide {
		base = commonDir(ps)
	}
	for _, p := range ps {
		state := stateName(p.GetState())
		sock := p.GetSocket()
		if base != "" {
			if rel, err := filepath.Rel(base, sock); err == nil {
				sock = rel
			}
		}
		versions := strings.Join(p.GetVersions(), ",")
		lastErr := oneLine(p.GetLastError())
		published := publishedText(p.GetPublished())
		if !wide {
			versions = truncate(versions, 32)
			lastErr = truncate(lastErr, 60)
			published = truncate(published, 48)
		}
		row := []string{sock, orDash(p.GetType()), orDash(p.GetName()), Paint(state, stateColor(state), color)}
		if forwarded {
			kubelet := kubeletCell(p.GetKubelet())
			if !wide {
				kubelet = truncate(kubelet, 40)
			}
			row = append(row, kubelet)
		}
		row = append(row, orDash(versions), age(p.GetLastTransition(), p.GetRegisteredAt(), now))
		if wide {
			next := "-"
			if t := p.GetNextRetry(); t != nil {
				next = "in " + shortDuration(t.AsTime().Sub(now))
			}
			row = append(row, orDash(p.GetEndpoint()), strconv.FormatUint(uint64(p.GetAttempts()), 10), next,
				orDash(p.GetHandlerFile()), orDash(ShortHash(p.GetHandlerSha256())), orDash(oneLine(strings.Join(p.GetNotPublished(), "; "))))
		}
		row = append(row, orDash(published), lastErr)
		tw.row(row...)
	}
	return tw.writeTo(w)
}

// commonDir returns the directory all sockets are under, "" when there is none but "/".
func commonDir(ps []*adminv1.Plugin) string {
	var dir string
	for i, p := range ps {
		d := filepath.Dir(p.GetSocket())
		if i == 0 {
			dir = d
			continue
		}
		for dir != "/" && dir != "." && d != dir && !strings.HasPrefix(d, dir+"/") {
			dir = filepath.Dir(dir)
		}
	}
	if dir == "/" || dir == "." {
		return ""
	}
	return dir
}

// publishedText renders what a handler published about a plugin as k=v pairs sorted by key.
func publishedText(m map[string]string) string {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+oneLine(m[k]))
	}
	return strings.Join(pairs, " ")
}

// Event is one event of wasmhost watch as -o json and -o yaml print it.
type Event struct {
	Type   string     `json:"type"`
	Time   *time.Time `json:"time,omitempty"`
	Plugin *Plugin    `json:"plugin,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// NewEvent is the view of ev.
func NewEvent(ev *adminv1.PluginEvent) Event {
	v := Event{Type: eventName(ev.GetType()), Time: timeOrNil(ev.GetTime()), Reason: ev.GetReason()}
	if ev.Plugin != nil {
		p := NewPlugin(ev.Plugin)
		v.Plugin = &p
	}
	return v
}

// eventName is ADDED, MODIFIED, DELETED, SYNCED or RESET.
func eventName(t adminv1.EventType) string {
	name, ok := strings.CutPrefix(t.String(), "EVENT_TYPE_")
	if !ok {
		return "UNKNOWN"
	}
	return name
}

// WriteEvent prints one watch event; listed counts the plugins since the last RESET.
func WriteEvent(w io.Writer, ev *adminv1.PluginEvent, listed int, color bool) {
	SafeMessage(ev)
	when := "-"
	if t := ev.GetTime(); t != nil {
		when = t.AsTime().Local().Format("15:04:05.000")
	}
	typ := eventName(ev.GetType())
	switch ev.GetType() {
	case adminv1.EventType_EVENT_TYPE_SYNCED:
		fmt.Fprintf(w, "%-12s  %-8s  %d plugin socket(s) listed; changes follow\n", when, typ, listed)
		return
	case adminv1.EventType_EVENT_TYPE_RESET:
		fmt.Fprintf(w, "%-12s  %s  %s\n", when, Paint(fmt.Sprintf("%-8s", typ), Yellow, color),
			"this client fell behind and missed events: forget the lines above; the list follows again")
		return
	}
	p := ev.GetPlugin()
	state := stateName(p.GetState())
	plugin := orDash(p.GetType()) + "/" + orDash(p.GetName())
	line := fmt.Sprintf("%-12s  %-8s  %s  %s  %s", when, typ,
		Paint(fmt.Sprintf("%-19s", state), stateColor(state), color), p.GetSocket(), plugin)
	if e := oneLine(p.GetLastError()); e != "" {
		line += "  " + e
	}
	fmt.Fprintln(w, line)
}

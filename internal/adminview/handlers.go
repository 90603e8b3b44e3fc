package adminview

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/host"
)

// Handler is a handler file (or source) as -o json and -o yaml print it.
type Handler struct {
	File         string     `json:"file,omitempty"`
	Name         string     `json:"name,omitempty"`
	Version      string     `json:"version,omitempty"`
	PluginTypes  []string   `json:"pluginTypes"`
	SHA256       string     `json:"sha256,omitempty"`
	Size         int64      `json:"size,omitempty"`
	ABIVersion   uint32     `json:"abiVersion,omitempty"`
	Capabilities []string   `json:"capabilities"`
	LoadedAt     *time.Time `json:"loadedAt,omitempty"`
	PoolSize     uint32     `json:"poolSize"`
	Calls        uint64     `json:"calls"`
	Failures     uint64     `json:"failures"`
	Traps        uint64     `json:"traps"`
	Timeouts     uint64     `json:"timeouts"`
	// CPU is the CPU time its guest code used; Throttled, the time its calls waited for a
	// turn to run guest code (handlers.limits.guestThreads).
	CPU         string     `json:"cpu"`
	Throttled   string     `json:"throttled"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
	// GoneSince is set while the file is gone from the handler directory: it is removed
	// (its plugin types leave) host.DefaultRemovalGrace after it unless it is back.
	GoneSince *time.Time `json:"goneSince,omitempty"`
	// Quarantine is set while the handler is quarantined (its calls fail at once after
	// repeated traps or timeouts), and once it has been.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
	KVKeys     uint64      `json:"kvKeys"`
	KVBytes    uint64      `json:"kvBytes"`
	// Pins are its plugin types served by an older revision (a rollback); Shadows, their
	// shadow candidates.
	Pins    []*Pin    `json:"pins,omitempty"`
	Shadows []*Shadow `json:"shadows,omitempty"`
	// Serving: a module of it serves calls; Reason, the class of LastError when it does not
	// serve; Source, "file" or "registry" (empty for a built-in handler, or a daemon that
	// does not say).
	Serving bool   `json:"serving"`
	Reason  string `json:"reason,omitempty"`
	Source  string `json:"source,omitempty"`
}

// Quarantine is where a handler stands with the quarantine.
type Quarantine struct {
	Active     bool       `json:"active"`
	Until      *time.Time `json:"until,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Times      uint64     `json:"times"`
	FastFailed uint64     `json:"fastFailed"`
}

// NewHandler is the view of h; a built-in handler, or one of a daemon that does not say,
// serves.
func NewHandler(h *adminv1.Handler) Handler {
	v := Handler{
		File:         h.GetFile(),
		PluginTypes:  h.GetPluginTypes(),
		SHA256:       h.GetSha256(),
		Size:         h.GetSize(),
		ABIVersion:   h.GetAbiVersion(),
		Capabilities: h.GetCapabilities(),
		LoadedAt:     timeOrNil(h.GetLoadedAt()),
		PoolSize:     h.GetPoolSize(),
		Calls:        h.GetCalls(),
		Failures:     h.GetFailures(),
		Traps:        h.GetTraps(),
		Timeouts:     h.GetTimeouts(),
		CPU:          h.GetCpu().AsDuration().String(),
		Throttled:    h.GetThrottled().AsDuration().String(),
		LastError:    h.GetLastError(),
		LastErrorAt:  timeOrNil(h.GetLastErrorAt()),
		GoneSince:    timeOrNil(h.GetGoneSince()),
		KVKeys:       h.GetKvKeys(),
		KVBytes:      h.GetKvBytes(),
		Name:         h.GetName(),
		Version:      h.GetVersion(),
		Serving:      h.GetServing() || h.GetSource() == "" && h.GetSha256() != "",
		Reason:       h.GetReason(),
		Source:       h.GetSource(),
	}
	for _, p := range h.GetPins() {
		v.Pins = append(v.Pins, newPin(p))
	}
	for _, s := range h.GetShadows() {
		v.Shadows = append(v.Shadows, newShadow(s))
	}
	if h.GetQuarantined() || h.GetQuarantines() > 0 {
		v.Quarantine = &Quarantine{Active: h.GetQuarantined(), Until: timeOrNil(h.GetQuarantinedUntil()),
			Reason: h.GetQuarantineReason(), Times: h.GetQuarantines(), FastFailed: h.GetFastFailed()}
	}
	if v.PluginTypes == nil {
		v.PluginTypes = []string{}
	}
	if v.Capabilities == nil {
		v.Capabilities = []string{}
	}
	return v
}

// Handlers are the views of hs, in their order.
func Handlers(hs []*adminv1.Handler) []Handler {
	views := make([]Handler, 0, len(hs))
	for _, h := range hs {
		views = append(views, NewHandler(h))
	}
	return views
}

// WriteHandlers prints hs as wasmhost handlers does: a table (more columns when wide), what
// serves nothing said first in LAST-ERROR, then a line for each pin and shadow run.
func WriteHandlers(w io.Writer, hs []*adminv1.Handler, wide bool, now time.Time) error {
	for _, h := range hs {
		SafeMessage(h)
	}
	tw := newTable()
	header := []string{"HANDLER", "NAME", "VERSION", "TYPES", "ABI", "POOL", "CALLS", "FAILURES", "TRAPS", "TIMEOUTS", "CPU", "THROTTLED", "AGE"}
	if wide {
		header = append(header, "SHA256", "SIZE", "CAPABILITIES")
	}
	header = append(header, "LAST-ERROR")
	tw.row(header...)
	for _, h := range hs {
		name := "(built-in)"
		if h.GetFile() != "" {
			name = filepath.Base(h.GetFile())
			if wide {
				name = h.GetFile()
			}
		}
		abi := "-"
		if h.GetAbiVersion() != 0 {
			abi = strconv.FormatUint(uint64(h.GetAbiVersion()), 10)
		}
		lastErr := oneLine(h.GetLastError())
		if h.GetQuarantined() {
			// Its calls fail at once: that is what the operator must see first.
			lastErr = "QUARANTINED until " + h.GetQuarantinedUntil().AsTime().Local().Format("15:04:05") + ": " + oneLine(h.GetQuarantineReason())
		}
		if !wide {
			// The row names the file already: say only what is wrong with it.
			if f := h.GetFile(); f != "" {
				lastErr = strings.TrimPrefix(strings.ReplaceAll(lastErr, " "+f+":", ":"), "host: ")
			}
		}
		if t := h.GetLastErrorAt(); lastErr != "" && !h.GetQuarantined() && t != nil {
			lastErr = shortDuration(now.Sub(t.AsTime())) + " ago: " + lastErr
		}
		if t := h.GetGoneSince(); t != nil {
			lastErr = "file gone " + shortDuration(now.Sub(t.AsTime())) + " ago, removed unless back within " + shortDuration(host.DefaultRemovalGrace)
		} else if h.GetSource() != "" && !h.GetServing() {
			// It serves nothing: that is what the operator must see first.
			why := h.GetReason()
			if why == "" {
				why = "refused"
			}
			mark := "NOT SERVING (" + why + ")"
			if lastErr != "" {
				mark += ": " + lastErr
			}
			lastErr = mark
		}
		if !wide {
			lastErr = truncate(lastErr, 60)
		}
		types := slices.Clone(h.GetPluginTypes())
		for i, t := range types {
			for _, p := range h.GetPins() {
				if p.GetPluginType() == t {
					types[i] += "(pinned)"
				}
			}
		}
		row := []string{name, orDash(h.GetName()), orDash(h.GetVersion()), orDash(strings.Join(types, ",")), abi,
			strconv.FormatUint(uint64(h.GetPoolSize()), 10),
			strconv.FormatUint(h.GetCalls(), 10), strconv.FormatUint(h.GetFailures(), 10),
			strconv.FormatUint(h.GetTraps(), 10), strconv.FormatUint(h.GetTimeouts(), 10),
			cpuTime(h.GetCpu().AsDuration()), cpuTime(h.GetThrottled().AsDuration()),
			age(h.GetLoadedAt(), nil, now)}
		if wide {
			size := "-"
			if h.GetSize() > 0 {
				size = strconv.FormatInt(h.GetSize(), 10)
			}
			row = append(row, orDash(h.GetSha256()), size, orDash(strings.Join(h.GetCapabilities(), ",")))
		}
		row = append(row, lastErr)
		tw.row(row...)
	}
	if err := tw.writeTo(w); err != nil {
		return err
	}
	for _, h := range hs {
		for _, p := range h.GetPins() {
			writePinLine(w, p)
		}
		for _, s := range h.GetShadows() {
			writeShadowLine(w, s)
		}
	}
	return nil
}

// History is the revisions the daemon keeps of a plugin type's handler, as -o json and -o yaml
// print them.
type History struct {
	PluginType string     `json:"pluginType"`
	Revisions  []Revision `json:"revisions"`
	Pin        *Pin       `json:"pin,omitempty"`
	Shadow     *Shadow    `json:"shadow,omitempty"`
}

// Revision is one revision of a handler the daemon keeps.
type Revision struct {
	SHA256      string     `json:"sha256"`
	File        string     `json:"file"`
	Name        string     `json:"name,omitempty"`
	Version     string     `json:"version,omitempty"`
	PluginTypes []string   `json:"pluginTypes"`
	Size        int64      `json:"size"`
	FirstLoaded *time.Time `json:"firstLoaded,omitempty"`
	Calls       uint64     `json:"calls"`
	Failures    uint64     `json:"failures"`
	Traps       uint64     `json:"traps"`
	Timeouts    uint64     `json:"timeouts"`
	Serving     bool       `json:"serving"`
	Pinned      bool       `json:"pinned"`
	InFile      bool       `json:"inFile"`
	RolledBack  string     `json:"rolledBack,omitempty"`
}

// Pin is a plugin type served by an older revision than its file holds (a rollback).
type Pin struct {
	PluginType string     `json:"pluginType"`
	SHA256     string     `json:"sha256"`
	FileSHA256 string     `json:"fileSHA256"`
	Auto       bool       `json:"auto"`
	Reason     string     `json:"reason,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
}

// Shadow is a candidate run beside the revision serving a plugin type, and what it found.
type Shadow struct {
	PluginType       string     `json:"pluginType"`
	SHA256           string     `json:"sha256"`
	File             string     `json:"file,omitempty"`
	Name             string     `json:"name,omitempty"`
	Version          string     `json:"version,omitempty"`
	Since            *time.Time `json:"since,omitempty"`
	Runs             uint64     `json:"runs"`
	Disagreements    uint64     `json:"disagreements"`
	Failures         uint64     `json:"failures"`
	Skipped          uint64     `json:"skipped"`
	LastDisagreement string     `json:"lastDisagreement,omitempty"`
}

// NewHistory is the view of resp.
func NewHistory(resp *adminv1.ListRevisionsResponse) History {
	v := History{PluginType: resp.GetPluginType(), Revisions: []Revision{},
		Pin: newPin(resp.GetPin()), Shadow: newShadow(resp.GetShadow())}
	for _, r := range resp.GetRevisions() {
		v.Revisions = append(v.Revisions, Revision{
			SHA256: r.GetSha256(), File: r.GetFile(), Name: r.GetName(), Version: r.GetVersion(),
			PluginTypes: r.GetPluginTypes(), Size: r.GetSize(), FirstLoaded: timeOrNil(r.GetFirstLoaded()),
			Calls: r.GetCalls(), Failures: r.GetFailures(), Traps: r.GetTraps(), Timeouts: r.GetTimeouts(),
			Serving: r.GetServing(), Pinned: r.GetPinned(), InFile: r.GetInFile(), RolledBack: r.GetRolledBack(),
		})
	}
	return v
}

func newPin(p *adminv1.Pin) *Pin {
	if p == nil {
		return nil
	}
	return &Pin{PluginType: p.GetPluginType(), SHA256: p.GetSha256(), FileSHA256: p.GetFileSha256(),
		Auto: p.GetAuto(), Reason: p.GetReason(), Since: timeOrNil(p.GetSince())}
}

func newShadow(s *adminv1.Shadow) *Shadow {
	if s == nil {
		return nil
	}
	return &Shadow{PluginType: s.GetPluginType(), SHA256: s.GetSha256(), File: s.GetFile(),
		Name: s.GetName(), Version: s.GetVersion(), Since: timeOrNil(s.GetSince()), Runs: s.GetRuns(),
		Disagreements: s.GetDisagreements(), Failures: s.GetFailures(), Skipped: s.GetSkipped(),
		LastDisagreement: s.GetLastDisagreement()}
}

// WriteHistory prints the revisions of a type as a table, its pin and shadow below.
func WriteHistory(w io.Writer, resp *adminv1.ListRevisionsResponse, now time.Time) error {
	SafeMessage(resp)
	tw := newTable()
	tw.row("SHA256", "NAME", "VERSION", "FIRST-LOADED", "CALLS", "FAILURES", "TRAPS", "TIMEOUTS", "STATE")
	for _, r := range resp.GetRevisions() {
		var state []string
		switch {
		case r.GetPinned():
			state = append(state, "serving (pinned)")
		case r.GetServing():
			state = append(state, "serving")
		}
		if r.GetInFile() {
			state = append(state, "in "+filepath.Base(r.GetFile()))
		}
		if rb := r.GetRolledBack(); rb != "" {
			state = append(state, "rolled back: "+truncate(oneLine(rb), 70))
		}
		first := "-"
		if t := r.GetFirstLoaded(); t != nil {
			first = t.AsTime().Local().Format("2006-01-02 15:04:05") + " (" + age(t, nil, now) + ")"
		}
		tw.row(ShortHash(r.GetSha256()), orDash(r.GetName()), orDash(r.GetVersion()), first,
			strconv.FormatUint(r.GetCalls(), 10), strconv.FormatUint(r.GetFailures(), 10),
			strconv.FormatUint(r.GetTraps(), 10), strconv.FormatUint(r.GetTimeouts(), 10),
			orDash(strings.Join(state, ", ")))
	}
	if err := tw.writeTo(w); err != nil {
		return err
	}
	writePinLine(w, resp.GetPin())
	writeShadowLine(w, resp.GetShadow())
	return nil
}

// writePinLine says which revision a pinned type serves, instead of which, why, and how to undo.
func writePinLine(w io.Writer, p *adminv1.Pin) {
	if p == nil {
		return
	}
	who := "by the operator"
	if p.GetAuto() {
		who = "automatically: " + oneLine(p.GetReason())
	}
	fmt.Fprintf(w, "PINNED  %s serves %s, not its file's %s: rolled back %s (undo: wasmhost handlers unpin %s)\n",
		p.GetPluginType(), ShortHash(p.GetSha256()), ShortHash(p.GetFileSha256()), who, p.GetPluginType())
}

// writeShadowLine says what a type's shadow candidate found.
func writeShadowLine(w io.Writer, s *adminv1.Shadow) {
	if s == nil {
		return
	}
	line := fmt.Sprintf("SHADOW  %s candidate %s (%s): %d runs, %d disagreements, %d failures",
		s.GetPluginType(), ShortHash(s.GetSha256()), NameVersion(s.GetName(), s.GetVersion()),
		s.GetRuns(), s.GetDisagreements(), s.GetFailures())
	if n := s.GetSkipped(); n > 0 {
		line += fmt.Sprintf(", %d skipped (the candidate was busy)", n)
	}
	if d := s.GetLastDisagreement(); d != "" {
		line += "; last: " + oneLine(d)
	}
	fmt.Fprintln(w, line)
}

// NameVersion says which module a revision is by its manifest's name and version.
func NameVersion(name, version string) string {
	switch {
	case name == "" && version == "":
		return "no name or version in its manifest"
	case version == "":
		return name
	}
	return strings.TrimSpace(name + " " + version)
}

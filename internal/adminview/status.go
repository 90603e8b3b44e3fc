package adminview

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// Status is wasmhost status as -o json and -o yaml print it.
type Status struct {
	Version        string            `json:"version"`
	StartedAt      *time.Time        `json:"startedAt,omitempty"`
	UptimeSeconds  float64           `json:"uptimeSeconds"`
	Ready          bool              `json:"ready"`
	NotReadyReason string            `json:"notReadyReason,omitempty"`
	Plugins        uint32            `json:"plugins"`
	PluginsByState map[string]uint32 `json:"pluginsByState"`
	Handlers       uint32            `json:"handlers"`
	// Of the handlers, those that serve and those that do not; the plugin types whose
	// plugins wait for a handler; and what does not serve, one line each.
	HandlersServing     uint32               `json:"handlersServing"`
	HandlersNotServing  uint32               `json:"handlersNotServing"`
	TypesWithoutHandler []TypeWithoutHandler `json:"typesWithoutHandler"`
	Problems            []string             `json:"problems"`
	Watchers            uint32               `json:"watchers"`
	// Publish is what handlers published, taken to the cluster; absent when it is off.
	Publish *Publish `json:"publish,omitempty"`
}

// TypeWithoutHandler is a plugin type whose plugins wait for a handler.
type TypeWithoutHandler struct {
	PluginType string `json:"pluginType"`
	Plugins    uint32 `json:"plugins"`
}

// Publish is what handlers published, on its way to the cluster.
type Publish struct {
	Sinks    []PublishSink  `json:"sinks"`
	Events   *PublishEvents `json:"events,omitempty"`
	Refused  uint32         `json:"refused"`
	Refusals []string       `json:"refusals,omitempty"`
}

// PublishEvents counts the Events recorded on the Node.
type PublishEvents struct {
	Recorded    uint64     `json:"recorded"`
	Dropped     uint64     `json:"dropped"`
	Failed      uint64     `json:"failed"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// PublishSink is one sink of what handlers publish, and how its writes go.
type PublishSink struct {
	Sink        string     `json:"sink"`
	Target      string     `json:"target"`
	State       string     `json:"state"`
	Writes      uint64     `json:"writes"`
	Failures    uint64     `json:"failures"`
	LastWrite   *time.Time `json:"lastWrite,omitempty"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
	NextRetry   *time.Time `json:"nextRetry,omitempty"`
	Labels      uint32     `json:"labels"`
	Attributes  uint32     `json:"attributes"`
	Instances   uint32     `json:"instances"`
	Holding     bool       `json:"holding,omitempty"`
}

// NewStatus is the view of st; empty lists and maps are written as such, not null.
func NewStatus(st *adminv1.Status) Status {
	v := Status{
		Version:        st.GetVersion(),
		StartedAt:      timeOrNil(st.GetStartedAt()),
		UptimeSeconds:  st.GetUptime().AsDuration().Seconds(),
		Ready:          st.GetReady(),
		NotReadyReason: st.GetNotReadyReason(),
		Plugins:        st.GetPlugins(),
		PluginsByState: st.GetPluginsByState(),
		Handlers:       st.GetHandlers(),
		Watchers:       st.GetWatchers(),

		HandlersServing:     st.GetHandlersServing(),
		HandlersNotServing:  st.GetHandlersNotServing(),
		TypesWithoutHandler: []TypeWithoutHandler{},
		Problems:            st.GetProblems(),
	}
	for _, t := range st.GetTypesWithoutHandler() {
		v.TypesWithoutHandler = append(v.TypesWithoutHandler, TypeWithoutHandler{PluginType: t.GetPluginType(), Plugins: t.GetPlugins()})
	}
	if v.Problems == nil {
		v.Problems = []string{}
	}
	if v.PluginsByState == nil {
		v.PluginsByState = map[string]uint32{}
	}
	if len(st.GetPublishSinks()) > 0 || st.GetPublishEvents() != nil {
		v.Publish = &Publish{Refused: st.GetPublishRefused(), Refusals: st.GetPublishRefusals(), Sinks: []PublishSink{}}
		if e := st.GetPublishEvents(); e != nil {
			v.Publish.Events = &PublishEvents{Recorded: e.GetRecorded(), Dropped: e.GetDropped(), Failed: e.GetFailed(),
				LastError: e.GetLastError(), LastErrorAt: timeOrNil(e.GetLastErrorAt())}
		}
		for _, k := range st.GetPublishSinks() {
			v.Publish.Sinks = append(v.Publish.Sinks, PublishSink{
				Sink: k.GetSink(), Target: k.GetTarget(), State: k.GetState(), Writes: k.GetWrites(), Failures: k.GetFailures(),
				LastWrite: timeOrNil(k.GetLastWrite()), LastError: k.GetLastError(), LastErrorAt: timeOrNil(k.GetLastErrorAt()),
				NextRetry: timeOrNil(k.GetNextRetry()), Labels: k.GetLabels(), Attributes: k.GetAttributes(), Instances: k.GetInstances(),
				Holding: k.GetHolding(),
			})
		}
	}
	return v
}

// WriteStatus prints st as wasmhost status does: one line a fact, then what does not serve
// under problems:, then publishing.
func WriteStatus(w io.Writer, st *adminv1.Status) {
	SafeMessage(st)
	ready := "yes"
	if !st.GetReady() {
		ready = "no: " + st.GetNotReadyReason()
	}
	started := ""
	if t := st.GetStartedAt(); t != nil {
		started = " (since " + t.AsTime().Local().Format(time.RFC3339) + ")"
	}
	// Every state the daemon counts, the known ones in the order of a plugin's life, then any
	// other a newer daemon sends: the breakdown adds up to the total.
	order := []string{"registered", "standby", "pending", "failing", "rejected", "waiting-for-handler", "gone"}
	counts := st.GetPluginsByState()
	states := slices.Clone(order)
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(order, s) {
			states = append(states, s)
		}
	}
	var byState []string
	for _, s := range states {
		if n := counts[s]; n > 0 {
			byState = append(byState, fmt.Sprintf("%d %s", n, s))
		}
	}
	plugins := strconv.FormatUint(uint64(st.GetPlugins()), 10)
	if len(byState) > 0 {
		plugins += " (" + strings.Join(byState, ", ") + ")"
	}
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(tw, "version:\t%s\n", st.GetVersion())
	fmt.Fprintf(tw, "uptime:\t%s%s\n", shortDuration(st.GetUptime().AsDuration()), started)
	fmt.Fprintf(tw, "ready:\t%s\n", ready)
	fmt.Fprintf(tw, "plugins:\t%s\n", plugins)
	// What serves is the count: a file or source that serves nothing (refused, not pulled yet)
	// is not a handler, and problems: says why.
	handlers := fmt.Sprintf("%d serving", st.GetHandlersServing())
	if n := st.GetHandlersNotServing(); n > 0 {
		handlers += fmt.Sprintf(", %d %s not serving", n, map[bool]string{true: "source or file", false: "sources or files"}[n == 1])
	}
	fmt.Fprintf(tw, "handlers:\t%s\n", handlers)
	fmt.Fprintf(tw, "watchers:\t%d\n", st.GetWatchers())
	for i, p := range st.GetProblems() {
		label := ""
		if i == 0 {
			label = "problems:"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, p)
	}
	for _, k := range st.GetPublishSinks() {
		line := fmt.Sprintf("%s %s, %d labels, %d attributes, %d instances", k.GetState(), k.GetTarget(), k.GetLabels(), k.GetAttributes(), k.GetInstances())
		if t := k.GetLastWrite(); t != nil {
			line += ", written " + shortDuration(time.Since(t.AsTime())) + " ago"
		}
		if k.GetHolding() {
			line += ", keeping what it held before the start"
		}
		if k.GetState() == "failing" {
			line += fmt.Sprintf(": %s (%d failures, next try in %s)", oneLine(k.GetLastError()), k.GetFailures(), shortDuration(time.Until(k.GetNextRetry().AsTime())))
		}
		fmt.Fprintf(tw, "publish %s:\t%s\n", k.GetSink(), line)
	}
	if e := st.GetPublishEvents(); e != nil {
		line := fmt.Sprintf("%d recorded, %d dropped, %d failed", e.GetRecorded(), e.GetDropped(), e.GetFailed())
		if e.GetLastError() != "" {
			line += "; last error " + shortDuration(time.Since(e.GetLastErrorAt().AsTime())) + " ago: " + oneLine(e.GetLastError())
		}
		fmt.Fprintf(tw, "publish events:\t%s\n", line)
	}
	if n := st.GetPublishRefused(); n > 0 {
		fmt.Fprintf(tw, "publish refused:\t%d keys not published as asked", n)
		if rs := st.GetPublishRefusals(); len(rs) > 0 {
			fmt.Fprintf(tw, ", e.g. %s", oneLine(rs[0]))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

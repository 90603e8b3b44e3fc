package main

// The client commands: plugins, handlers, watch and status ask a running daemon over its admin
// API (package adminv1) on the admin unix socket, through package admin/client.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/host"
)

// envAdminSocket overrides the default of --admin-socket for the client commands.
const envAdminSocket = "WASMHOST_ADMIN_SOCKET"

// clientCallTimeout bounds one list or status call.
const clientCallTimeout = 10 * time.Second

// newClientCmds returns the commands that talk to a running daemon.
func newClientCmds() []*cobra.Command {
	cmds := []*cobra.Command{newPluginsCmd(), newHandlersCmd(), newWatchCmd(), newStatusCmd()}
	for _, c := range cmds {
		hintOtherSocket(c)
	}
	return cmds
}

// socketHint is what a client command adds when no daemon listens on the socket it tried.
const socketHint = "; a daemon with another admin socket: pass --admin-socket PATH or set $" + envAdminSocket +
	" (a daemon listens on <its --state-dir>/admin.sock unless it was started with --admin-socket)"

// hintOtherSocket makes cmd and its subcommands that take --admin-socket say how to point
// them at another daemon's socket when none listens on the one they tried.
func hintOtherSocket(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		hintOtherSocket(c)
	}
	run := cmd.RunE
	if run == nil || cmd.Flags().Lookup("admin-socket") == nil {
		return
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		err := run(c, args)
		if errors.Is(err, client.ErrNotRunning) {
			return fmt.Errorf("%w%s", err, socketHint)
		}
		return err
	}
}

// clientOpts are the flags every client command has.
type clientOpts struct {
	socket string
	output string
}

func (o *clientOpts) bind(cmd *cobra.Command, formats ...string) {
	def := os.Getenv(envAdminSocket)
	if def == "" {
		def = client.DefaultSocketPath
	}
	cmd.Flags().StringVar(&o.socket, "admin-socket", def,
		"the running daemon's admin socket: <its --state-dir>/admin.sock unless it was started with --admin-socket (default from $"+envAdminSocket+" when set)")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if o.socket == "" {
			return errors.New("--admin-socket is empty")
		}
		return nil
	}
	bindOutput(cmd, &o.output, formats...)
}

func newPluginsCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List the plugin sockets a running daemon knows, and their state",
		Long: `List every plugin socket the running wasmhost daemon knows, whatever its state:

  registered           the plugin's handler registered it and the plugin was notified
  pending              seen; registration has not finished yet
  failing              the last attempt failed (LAST-ERROR); retried with backoff
  waiting-for-handler  no handler is loaded for the plugin's type; it is registered as
                       soon as one is

When plugins are forwarded to the kubelet (forward.types), KUBELET says what the kubelet
made of the plugin its handler admitted: pending (not answered yet), registered, refused:
and the kubelet's own reason, or timeout (it did not answer; retried with backoff); - for
a plugin that is not forwarded.

SOCKET is relative to the directory the sockets have in common (-o wide shows the full
path); AGE is the time since the plugin entered its state. -o wide adds the endpoint,
attempts, next retry, the handler's file and SHA-256, and what of the plugin's published
keys did not reach the cluster as asked (NOT-PUBLISHED: too large, over its type's share, not
a label); -o json and -o yaml print everything.`,
		Example: `  wasmhost plugins
  wasmhost plugins -o wide
  wasmhost plugins -o json | jq -r '.[] | select(.state == "failing") | .socket'
  wasmhost plugins -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ListPluginsResponse, error) {
				ps, err := client.ListAllPlugins(ctx, c)
				return &adminv1.ListPluginsResponse{Plugins: ps}, err
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch o.output {
			case "json", "yaml":
				views := make([]pluginView, 0, len(resp.Plugins))
				for _, p := range resp.Plugins {
					views = append(views, newPluginView(p))
				}
				return writeStructured(out, o.output, views)
			default:
				if len(resp.Plugins) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "No plugin sockets found.")
					return nil
				}
				return writePluginTable(out, resp.Plugins, o.output == "wide", useColor(out), time.Now())
			}
		},
	}
	o.bind(cmd, "table", "wide", "json", "yaml")
	cmd.AddCommand(newCaptureCmd())
	return cmd
}

func newHandlersCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "handlers",
		Short: "List the handlers a running daemon has loaded",
		Long: `List the handlers the running wasmhost daemon has loaded, one per module file (built-in
handlers have none), with the plugin types each serves and what its calls did since it
was loaded: CALLS, FAILURES, and of the failures TRAPS (the module crashed; the instance
was thrown away) and TIMEOUTS (the call ran out of time). NAME and VERSION are the module
manifest's. AGE is the time since it was loaded. -o wide adds the file's full path,
SHA-256 and size, and the capabilities the handler was granted; -o json and -o yaml print
everything.

A plugin type served by an older revision than its file holds (a rollback: wasmhost
handlers rollback, or an automatic one) is marked "(pinned)" in TYPES and explained below
the table, as is a type's shadow candidate (wasmhost handlers shadow).`,
		Example: `  wasmhost handlers
  wasmhost handlers -o json | jq '.[] | {file, traps, lastError}'
  wasmhost handlers history CSIPlugin
  wasmhost handlers rollback CSIPlugin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ListHandlersResponse, error) {
				hs, err := client.ListAllHandlers(ctx, c)
				return &adminv1.ListHandlersResponse{Handlers: hs}, err
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch o.output {
			case "json", "yaml":
				views := make([]handlerView, 0, len(resp.Handlers))
				for _, h := range resp.Handlers {
					views = append(views, newHandlerView(h))
				}
				return writeStructured(out, o.output, views)
			default:
				if len(resp.Handlers) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "No handlers loaded.")
					return nil
				}
				return writeHandlerTable(out, resp.Handlers, o.output == "wide", time.Now())
			}
		},
	}
	o.bind(cmd, "table", "wide", "json", "yaml")
	cmd.AddCommand(newRevisionCmds()...)
	return cmd
}

func newWatchCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print plugin changes as they happen",
		Long: `Print the plugins the running daemon knows, then every change as it happens, until
interrupted (Ctrl-C).

Each line is an event: ADDED (a plugin socket appeared; first, one for each plugin that
exists), SYNCED (the list so far is complete), MODIFIED (a plugin changed state, or
failed again), DELETED (its socket is gone). RESET means this client fell behind and
missed events: forget what was printed so far; a fresh list follows.

-o json prints one JSON object per line, for jq or a program; -o yaml one YAML document
per event, each starting with ---.`,
		Example: `  wasmhost watch
  wasmhost watch -o json | jq -c 'select(.type == "MODIFIED") | .plugin | {socket, state}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.Dial(o.socket)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			stream, err := c.WatchPlugins(ctx, &adminv1.WatchPluginsRequest{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			color := useColor(out)
			if o.output == "table" {
				fmt.Fprintf(out, "%-12s  %-8s  %-19s  %s\n", "TIME", "EVENT", "STATE", "SOCKET  TYPE/NAME  LAST-ERROR")
			}
			listed := 0
			for {
				ev, err := stream.Recv()
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, io.EOF) {
						return nil // interrupted, or the daemon ended the stream cleanly
					}
					if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "shutting down") {
						return fmt.Errorf("the daemon at %s is shutting down", o.socket)
					}
					return err
				}
				if o.output != "table" {
					if err := writeStreamed(out, o.output, newEventView(ev)); err != nil {
						return err
					}
					continue
				}
				switch ev.Type {
				case adminv1.EventType_EVENT_TYPE_ADDED:
					listed++
				case adminv1.EventType_EVENT_TYPE_RESET:
					listed = 0
				}
				writeEventLine(out, ev, listed, color)
			}
		},
	}
	o.bind(cmd, "table", "json", "yaml")
	return cmd
}

func newStatusCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether a running daemon is ready, with its version, uptime and counts",
		Long: `Show the running daemon's version and uptime, whether it is ready (it has listed the
socket directory once and loaded the handlers it found at start-up), and how many plugin
sockets it knows by state, handlers it runs and clients watching it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.Status, error) {
				return c.GetStatus(ctx, &adminv1.GetStatusRequest{})
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if o.output != "text" {
				return writeStructured(out, o.output, newStatusView(st))
			}
			writeStatus(out, st)
			return nil
		},
	}
	o.bind(cmd, "text", "json", "yaml")
	return cmd
}

// callAdmin makes one unary call to the daemon on socket within clientCallTimeout; its error
// says what is wrong and what to do (package admin/client explains it).
func callAdmin[T any](cmd *cobra.Command, socket string, call func(context.Context, adminv1.AdminClient) (T, error)) (T, error) {
	var zero T
	c, err := client.Dial(socket)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), clientCallTimeout)
	defer cancel()
	resp, err := call(ctx, c)
	if err != nil {
		return zero, err
	}
	return resp, nil
}

// The views: the stable output of -o json and -o yaml. Keys in camelCase (output.go), states
// in the daemon's words, times in RFC 3339.

type pluginView struct {
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
	Kubelet        *kubeletView      `json:"kubelet,omitempty"`
	NotPublished   []string          `json:"notPublished,omitempty"`
}

// kubeletView is where a plugin of a forwarded type stands with the kubelet.
type kubeletView struct {
	State  string     `json:"state"`
	Error  string     `json:"error,omitempty"`
	Socket string     `json:"socket,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

func newKubeletView(k *adminv1.KubeletStatus) *kubeletView {
	if k == nil {
		return nil
	}
	return &kubeletView{State: kubeletStateName(k.GetState()), Error: k.GetError(), Socket: k.GetSocket(), Since: timeOrNil(k.GetSince())}
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

func newPluginView(p *adminv1.Plugin) pluginView {
	v := pluginView{
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
		Kubelet:        newKubeletView(p.GetKubelet()),
		NotPublished:   p.GetNotPublished(),
	}
	if v.Versions == nil {
		v.Versions = []string{}
	}
	return v
}

type handlerView struct {
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
	Quarantine *quarantineView `json:"quarantine,omitempty"`
	KVKeys     uint64          `json:"kvKeys"`
	KVBytes    uint64          `json:"kvBytes"`
	// Pins are its plugin types served by an older revision (a rollback); Shadows, their
	// shadow candidates.
	Pins    []*pinView    `json:"pins,omitempty"`
	Shadows []*shadowView `json:"shadows,omitempty"`
	// Serving: a module of it serves calls; Reason, the class of LastError when it does not
	// serve; Source, "file" or "registry" (empty for a built-in handler, or a daemon that
	// does not say).
	Serving bool   `json:"serving"`
	Reason  string `json:"reason,omitempty"`
	Source  string `json:"source,omitempty"`
}

type quarantineView struct {
	Active     bool       `json:"active"`
	Until      *time.Time `json:"until,omitempty"`
	Reason     string     `json:"reason,omitempty"`
	Times      uint64     `json:"times"`
	FastFailed uint64     `json:"fastFailed"`
}

func newHandlerView(h *adminv1.Handler) handlerView {
	v := handlerView{
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
		v.Pins = append(v.Pins, newPinView(p))
	}
	for _, s := range h.GetShadows() {
		v.Shadows = append(v.Shadows, newShadowView(s))
	}
	if h.GetQuarantined() || h.GetQuarantines() > 0 {
		v.Quarantine = &quarantineView{Active: h.GetQuarantined(), Until: timeOrNil(h.GetQuarantinedUntil()),
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

type eventView struct {
	Type   string      `json:"type"`
	Time   *time.Time  `json:"time,omitempty"`
	Plugin *pluginView `json:"plugin,omitempty"`
	Reason string      `json:"reason,omitempty"`
}

func newEventView(ev *adminv1.PluginEvent) eventView {
	v := eventView{Type: eventName(ev.GetType()), Time: timeOrNil(ev.GetTime()), Reason: ev.GetReason()}
	if ev.Plugin != nil {
		p := newPluginView(ev.Plugin)
		v.Plugin = &p
	}
	return v
}

type statusView struct {
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
	HandlersServing     uint32                 `json:"handlersServing"`
	HandlersNotServing  uint32                 `json:"handlersNotServing"`
	TypesWithoutHandler []typeWithoutHandlerVw `json:"typesWithoutHandler"`
	Problems            []string               `json:"problems"`
	Watchers            uint32                 `json:"watchers"`
	// Publish is what handlers published, taken to the cluster; absent when it is off.
	Publish *publishView `json:"publish,omitempty"`
}

type typeWithoutHandlerVw struct {
	PluginType string `json:"pluginType"`
	Plugins    uint32 `json:"plugins"`
}

type publishView struct {
	Sinks    []publishSinkView `json:"sinks"`
	Events   *eventsView       `json:"events,omitempty"`
	Refused  uint32            `json:"refused"`
	Refusals []string          `json:"refusals,omitempty"`
}

type eventsView struct {
	Recorded    uint64     `json:"recorded"`
	Dropped     uint64     `json:"dropped"`
	Failed      uint64     `json:"failed"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

type publishSinkView struct {
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

func newStatusView(st *adminv1.Status) statusView {
	v := statusView{
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
		TypesWithoutHandler: []typeWithoutHandlerVw{},
		Problems:            st.GetProblems(),
	}
	for _, t := range st.GetTypesWithoutHandler() {
		v.TypesWithoutHandler = append(v.TypesWithoutHandler, typeWithoutHandlerVw{PluginType: t.GetPluginType(), Plugins: t.GetPlugins()})
	}
	if v.Problems == nil {
		v.Problems = []string{}
	}
	if v.PluginsByState == nil {
		v.PluginsByState = map[string]uint32{}
	}
	if len(st.GetPublishSinks()) > 0 || st.GetPublishEvents() != nil {
		v.Publish = &publishView{Refused: st.GetPublishRefused(), Refusals: st.GetPublishRefusals(), Sinks: []publishSinkView{}}
		if e := st.GetPublishEvents(); e != nil {
			v.Publish.Events = &eventsView{Recorded: e.GetRecorded(), Dropped: e.GetDropped(), Failed: e.GetFailed(),
				LastError: e.GetLastError(), LastErrorAt: timeOrNil(e.GetLastErrorAt())}
		}
		for _, k := range st.GetPublishSinks() {
			v.Publish.Sinks = append(v.Publish.Sinks, publishSinkView{
				Sink: k.GetSink(), Target: k.GetTarget(), State: k.GetState(), Writes: k.GetWrites(), Failures: k.GetFailures(),
				LastWrite: timeOrNil(k.GetLastWrite()), LastError: k.GetLastError(), LastErrorAt: timeOrNil(k.GetLastErrorAt()),
				NextRetry: timeOrNil(k.GetNextRetry()), Labels: k.GetLabels(), Attributes: k.GetAttributes(), Instances: k.GetInstances(),
				Holding: k.GetHolding(),
			})
		}
	}
	return v
}

func timeOrNil(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

// stateName is the daemon's name of a state: "registered", "waiting-for-handler", ...
func stateName(s adminv1.PluginState) string {
	name, ok := strings.CutPrefix(s.String(), "PLUGIN_STATE_")
	if !ok || s == adminv1.PluginState_PLUGIN_STATE_UNSPECIFIED {
		return "unknown"
	}
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// eventName is ADDED, MODIFIED, DELETED, SYNCED or RESET.
func eventName(t adminv1.EventType) string {
	name, ok := strings.CutPrefix(t.String(), "EVENT_TYPE_")
	if !ok {
		return "UNKNOWN"
	}
	return name
}

// Terminal colours. Every code is five bytes and the reset four, so a column whose cells are
// all coloured stays aligned in text/tabwriter, which counts the codes as text.
const (
	colorRed    = "\x1b[31m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorGrey   = "\x1b[90m"
	colorNone   = "\x1b[39m"
	colorReset  = "\x1b[0m"
)

// useColor reports whether w is a terminal that wants colour (NO_COLOR is honoured).
func useColor(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

func stateColor(state string) string {
	switch state {
	case "registered":
		return colorGreen
	case "failing", "rejected":
		return colorRed
	case "pending", "waiting-for-handler", "standby":
		return colorYellow
	case "gone":
		return colorGrey
	default:
		return colorNone
	}
}

// paint wraps s in code when color is on.
func paint(s, code string, color bool) string {
	if !color {
		return s
	}
	return code + s + colorReset
}

// table aligns tab-separated rows into columns two spaces apart, without trailing blanks.
type table struct {
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable() *table {
	t := &table{}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 8, 2, ' ', 0)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) writeTo(w io.Writer) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for line := range strings.Lines(t.buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	_, err := io.WriteString(w, out.String())
	return err
}

func writePluginTable(w io.Writer, ps []*adminv1.Plugin, wide, color bool, now time.Time) error {
	for _, p := range ps {
		safeMessage(p)
	}
	tw := newTable()
	header := []string{"SOCKET", "TYPE", "NAME", paint("STATE", colorNone, color)}
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
		row := []string{sock, orDash(p.GetType()), orDash(p.GetName()), paint(state, stateColor(state), color)}
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
				orDash(p.GetHandlerFile()), orDash(shortHash(p.GetHandlerSha256())), orDash(oneLine(strings.Join(p.GetNotPublished(), "; "))))
		}
		row = append(row, orDash(published), lastErr)
		tw.row(row...)
	}
	return tw.writeTo(w)
}

func writeHandlerTable(w io.Writer, hs []*adminv1.Handler, wide bool, now time.Time) error {
	for _, h := range hs {
		safeMessage(h)
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

// publishedText renders what a handler published about a plugin as k=v pairs sorted by key.
func publishedText(m map[string]string) string {
	pairs := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+oneLine(m[k]))
	}
	return strings.Join(pairs, " ")
}

// writeEventLine prints one watch event; listed counts the plugins since the last RESET.
func writeEventLine(w io.Writer, ev *adminv1.PluginEvent, listed int, color bool) {
	safeMessage(ev)
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
		fmt.Fprintf(w, "%-12s  %s  %s\n", when, paint(fmt.Sprintf("%-8s", typ), colorYellow, color),
			"this client fell behind and missed events: forget the lines above; the list follows again")
		return
	}
	p := ev.GetPlugin()
	state := stateName(p.GetState())
	plugin := orDash(p.GetType()) + "/" + orDash(p.GetName())
	line := fmt.Sprintf("%-12s  %-8s  %s  %s  %s", when, typ,
		paint(fmt.Sprintf("%-19s", state), stateColor(state), color), p.GetSocket(), plugin)
	if e := oneLine(p.GetLastError()); e != "" {
		line += "  " + e
	}
	fmt.Fprintln(w, line)
}

func writeStatus(w io.Writer, st *adminv1.Status) {
	safeMessage(st)
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

// age is the time since t (or, when t is absent, since alt), kubectl-style.
func age(t, alt *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		t = alt
	}
	if t == nil {
		return "-"
	}
	return shortDuration(now.Sub(t.AsTime()))
}

// shortDuration renders d the way kubectl renders ages: 45s, 3m20s, 12m, 5h, 3d.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on one table line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// cpuTime shows a CPU or waiting time in a table: "-" for none, else to the millisecond (to
// the microsecond under one millisecond).
func cpuTime(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

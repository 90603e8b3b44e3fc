package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/internal/fleet"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/state"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "What the daemons of every node published to the cluster",
	}
	cmd.AddCommand(newClusterPluginsCmd(), newClusterPruneCmd(), newClusterCheckCmd())
	return cmd
}

// clusterRequestTimeout bounds each request (a page), unless the kubeconfig sets one.
const clusterRequestTimeout = 30 * time.Second

// clusterFlags are the flags that say how to reach the cluster and which objects to read.
type clusterFlags struct {
	kubeconfig, kubeContext, namespace string
	nodes                              []string
	chunkSize                          int64
}

func (f *clusterFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&f.kubeContext, "context", "", "kubeconfig context (default its current context)")
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", "", "namespace of the NodeFeature objects (default all)")
	cmd.Flags().StringSliceVar(&f.nodes, "node", nil, "only these nodes (comma-separated or repeated)")
	cmd.Flags().Int64Var(&f.chunkSize, "chunk-size", fleet.DefaultChunkSize, "objects read per request (0: all in one response)")
}

// options returns the fleet options of f, and the kubeconfig's REST config.
func (f *clusterFlags) options() (fleet.Options, error) {
	rc, err := kube.KubectlConfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return fleet.Options{}, err
	}
	if rc.Timeout == 0 {
		rc.Timeout = clusterRequestTimeout
	}
	client, err := kube.Dynamic(rc)
	if err != nil {
		return fleet.Options{}, err
	}
	nodes, err := fleet.NewNodeTable(rc)
	if err != nil {
		return fleet.Options{}, err
	}
	o := fleet.Options{Client: client, Nodes: nodes, Namespace: f.namespace, ChunkSize: f.chunkSize, Filter: fleet.Filter{Nodes: f.nodes}}
	if f.chunkSize == 0 {
		o.ChunkSize = -1
	}
	return o, nil
}

// clusterPlugin is one line of `cluster plugins -o json`: a plugin with its node's facts; a
// node whose object holds no plugin is one with an empty type.
type clusterPlugin struct {
	Node           string `json:"node"`
	Namespace      string `json:"namespace"`
	NodeReady      string `json:"nodeReady,omitempty"`
	RenewTime      string `json:"renewTime,omitempty"`
	RenewInterval  string `json:"renewInterval,omitempty"`
	MissedRenewals int    `json:"missedRenewals"`
	Stale          bool   `json:"stale"`
	fleet.Plugin
}

func recordsOf(n fleet.Node) []clusterPlugin {
	base := clusterPlugin{Node: n.Name, Namespace: n.Namespace, NodeReady: n.Ready, MissedRenewals: n.Missed, Stale: n.Stale}
	if n.Renewed {
		base.RenewTime = n.Renewal.At.UTC().Format(time.RFC3339)
		base.RenewInterval = n.Renewal.Every.String()
	}
	if len(n.Plugins) == 0 {
		return []clusterPlugin{base}
	}
	out := make([]clusterPlugin, len(n.Plugins))
	for i, p := range n.Plugins {
		out[i] = base
		out[i].Plugin = p
	}
	return out
}

var pluginStates = []string{string(state.StateRegistered), string(state.StateStandby), string(state.StateFailing),
	string(state.StateRejected), string(state.StateWaitingForHandler)}

func newClusterPluginsCmd() *cobra.Command {
	var f clusterFlags
	var output string
	var types, states []string
	var stale bool
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List every node's plugins, their types, states and what their handlers published",
		Long: `List the plugins of every node as the nodes' wasmhost daemons published them: one
NodeFeature object per node (publish.nodeFeature, labelled app.kubernetes.io/managed-by=wasmhost),
read with your kubeconfig as kubectl reads it ($KUBECONFIG or ~/.kube/config, --kubeconfig,
--context), --chunk-size objects a request, each page printed before the next is read. Only the
plugin types whose handlers.types.<T>.publish is set are there.

READY is the Node's own Ready condition (NotFound: no such Node). RENEWED is how long ago the
node's daemon last wrote its object; it renews it every 10 minutes, and a node that missed two
renewals is marked stale: its daemon stopped, or cannot reach the API server, and what it says
may be out of date. A node whose object holds no plugin is one line with "-" for its plugin.

-o json writes {"plugins": [...]} with one plugin a line, as each page arrives.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range states {
				if !slices.Contains(pluginStates, s) {
					return fmt.Errorf("--state %q: want one of %s", s, strings.Join(pluginStates, ", "))
				}
			}
			o, err := f.options()
			if err != nil {
				return err
			}
			o.Filter.Types, o.Filter.States = types, states
			if cmd.Flags().Changed("stale") {
				o.Filter.Stale = &stale
			}
			out := cmd.OutOrStdout()
			var w pluginWriter = &pluginTable{w: out, wide: output == "wide", now: time.Now()}
			if output == "json" || output == "yaml" {
				w = &pluginDoc{w: bufio.NewWriter(out), yaml: output == "yaml"}
			}
			o.PageDone = w.pageDone
			st, err := fleet.List(cmd.Context(), o, w.node)
			if st.NodesErr != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the Nodes' Ready condition is not shown: %v (the reader needs list of nodes: ClusterRole wasmhost-fleet-view)\n", st.NodesErr)
			}
			if err != nil {
				return err
			}
			return w.end()
		},
	}
	f.bind(cmd)
	cmd.Flags().StringSliceVar(&types, "type", nil, "only plugins of these types")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only plugins in these states ("+strings.Join(pluginStates, ", ")+")")
	cmd.Flags().BoolVar(&stale, "stale", false, "only stale nodes (--stale=false: only fresh ones)")
	bindOutput(cmd, &output, "table", "wide", "json", "yaml")
	return cmd
}

func newClusterPruneCmd() *cobra.Command {
	var f clusterFlags
	var after int
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete the NodeFeature objects of daemons that stopped renewing them",
		Long: `Delete wasmhost's NodeFeature objects whose daemon missed --after renewals (default 6: an
hour at the daemons' 10-minute renewal): a daemon stopped for good (its DaemonSet removed, or
its node gone) leaves its object, and node-feature-discovery its labels, until then. A daemon
restarted or rolled out renews its object at start, and one that comes back later writes it
again. Each delete is conditional on the object read, so one renewed meanwhile stays. Run it
after removing the DaemonSet, or from a CronJob; it needs list and delete of nodefeatures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			o.Nodes = nil
			out := cmd.OutOrStdout()
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			var failed []error
			_, err = fleet.Prune(cmd.Context(), o, after, dryRun, func(p fleet.Pruned) error {
				if p.Err != nil {
					failed = append(failed, p.Err)
					return nil
				}
				_, err := fmt.Fprintf(out, "%s NodeFeature %s/%s: renewed %s ago, %d renewals of %s missed\n", verb,
					safeText(p.Namespace), safeText(p.Name), ago(time.Since(p.Renewal.At)), p.Missed, p.Renewal.Every)
				return err
			})
			return errors.Join(append([]error{err}, failed...)...)
		},
	}
	f.bind(cmd)
	cmd.Flags().IntVar(&after, "after", fleet.DefaultPruneAfter, "renewals missed before an object is deleted (at least 2)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only say what would be deleted")
	return cmd
}

// pluginWriter writes the fleet view as it is read: node by node, page by page, then the
// end.
type pluginWriter interface {
	node(fleet.Node) error
	pageDone() error
	end() error
}

// pluginDoc writes {"plugins": [...]} (or its YAML) one plugin at a time: in JSON each on a
// line of its own, so a program can read it line by line, or whole. What it writes goes out
// at the end of each page.
type pluginDoc struct {
	w     *bufio.Writer
	yaml  bool
	wrote bool
}

func (d *pluginDoc) node(n fleet.Node) error {
	for _, r := range recordsOf(n) {
		var err error
		if d.yaml {
			var b []byte
			if b, err = toYAML([]clusterPlugin{r}); err == nil {
				if !d.wrote {
					b = append([]byte("plugins:\n"), b...)
				}
				_, err = d.w.Write(b)
			}
		} else {
			sep := ",\n"
			if !d.wrote {
				sep = "{\"plugins\": [\n"
			}
			if _, err = io.WriteString(d.w, sep); err == nil {
				err = writeJSONLine(d.w, r)
			}
		}
		if err != nil {
			return err
		}
		d.wrote = true
	}
	return nil
}

func (d *pluginDoc) pageDone() error { return d.w.Flush() }

func (d *pluginDoc) end() error {
	var tail string
	switch {
	case d.yaml && !d.wrote:
		tail = "plugins: []\n"
	case d.yaml:
	case !d.wrote:
		tail = "{\"plugins\": []}\n"
	default:
		tail = "\n]}\n"
	}
	if _, err := io.WriteString(d.w, tail); err != nil {
		return err
	}
	return d.w.Flush()
}

// writeJSONLine writes v as JSON without the encoder's newline.
func writeJSONLine(w io.Writer, v any) error {
	var b strings.Builder
	if err := writeJSON(&b, v, false); err != nil {
		return err
	}
	_, err := io.WriteString(w, strings.TrimSuffix(b.String(), "\n"))
	return err
}

// pluginTable writes the table a page at a time: its columns as wide as the widest cell
// so far (a later page may widen them; no page waits for the last). It holds a page's rows.
type pluginTable struct {
	w      io.Writer
	wide   bool
	now    time.Time
	widths []int
	rows   [][]string
	head   bool
}

func (t *pluginTable) header() {
	if t.head {
		return
	}
	t.head = true
	head := []string{"NODE", "READY", "RENEWED", "TYPE", "NAME", "STATE", "VERSIONS", "PUBLISHED"}
	if t.wide {
		head = append(head, "NAMESPACE", "SOCKET", "HANDLER")
	}
	t.rows = append(t.rows, head)
}

func (t *pluginTable) node(n fleet.Node) error {
	t.header()
	for _, r := range recordsOf(n) {
		t.rows = append(t.rows, t.row(n, r))
	}
	return nil
}

func (t *pluginTable) pageDone() error { return t.flush() }

func (t *pluginTable) row(n fleet.Node, r clusterPlugin) []string {
	ready := cmpOr(n.Ready, "?")
	renewed := "unknown"
	if n.Renewed {
		renewed = ago(t.now.Sub(n.Renewal.At)) + " ago"
		if n.Stale {
			renewed += " (stale)"
		}
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(r.Published)) {
		kv = append(kv, k+"="+r.Published[k])
	}
	pub := cmpOr(strings.Join(kv, " "), "-")
	if !t.wide {
		pub = cut(pub, 48)
	}
	row := []string{n.Name, ready, renewed, cmpOr(r.Type, "-"), cmpOr(r.Name, "-"), cmpOr(r.State, "-"),
		cut(cmpOr(strings.Join(r.Versions, ","), "-"), 32), pub}
	if t.wide {
		row = append(row, n.Namespace, cmpOr(r.Socket, "-"), cmpOr(r.Handler, "-"))
	}
	for i := range row {
		row[i] = safeText(row[i])
	}
	return row
}

// flush writes the rows held, padded to the widths so far.
func (t *pluginTable) flush() error {
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows = t.rows[:0]
	_, err := io.WriteString(t.w, b.String())
	return err
}

// end writes what is held: the header alone when there was no node.
func (t *pluginTable) end() error {
	t.header()
	return t.flush()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ago is a duration as kubectl shows ages: 45s, 12m, 3h, 2d.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func cut(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "What the daemons of every node published to the cluster",
	}
	cmd.AddCommand(newClusterPluginsCmd())
	return cmd
}

// clusterPlugin is one plugin as a node's NodeFeature object says it.
type clusterPlugin struct {
	Node      string            `json:"node"`
	Type      string            `json:"type"`
	Name      string            `json:"name"`
	State     string            `json:"state"`
	Versions  []string          `json:"versions,omitempty"`
	Socket    string            `json:"socket,omitempty"`
	Handler   string            `json:"handler,omitempty"`
	Published map[string]string `json:"published,omitempty"`
}

func newClusterPluginsCmd() *cobra.Command {
	var kubeconfig, kubeContext, namespace, output string
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List every node's plugins, their types, states and what their handlers published",
		Long: `List the plugins of every node as the nodes' wasmhost daemons published them: one
NodeFeature object per node (publish.nodeFeature), read with your kubeconfig as kubectl reads
it ($KUBECONFIG or ~/.kube/config, --kubeconfig, --context). Only the plugin types whose
handlers.types.<T>.publish is set are there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kube.KubectlConfig(kubeconfig, kubeContext)
			if err != nil {
				return err
			}
			client, err := kube.Dynamic(rc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			list, err := client.Resource(kube.NodeFeatureResource).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.NodeNameLabel})
			if err != nil {
				return fmt.Errorf("listing NodeFeatures: %w", err)
			}
			var ps []clusterPlugin
			for i := range list.Items {
				obj := &list.Items[i]
				ps = append(ps, clusterPlugins(obj.GetLabels()[kube.NodeNameLabel], kube.FromNodeFeature(obj))...)
			}
			slices.SortFunc(ps, func(a, b clusterPlugin) int {
				return strings.Compare(a.Node+"\x00"+a.Type+"\x00"+a.Name+"\x00"+a.Socket, b.Node+"\x00"+b.Type+"\x00"+b.Name+"\x00"+b.Socket)
			})
			out := cmd.OutOrStdout()
			if output == "json" || output == "yaml" {
				if ps == nil {
					ps = []clusterPlugin{}
				}
				return writeStructured(out, output, map[string]any{"plugins": ps})
			}
			writeClusterPlugins(out, ps, output == "wide")
			return nil
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context (default its current context)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of the NodeFeature objects (default all)")
	bindOutput(cmd, &output, "table", "wide", "json", "yaml")
	return cmd
}

// clusterPlugins returns the plugins a node's NodeFeature holds: the instances the daemon
// wrote, with what the handler published: an active plugin's keys are its type's attributes
// <plugin>_<key> (publish.KeyName), a standby's the instance's keys besides the daemon's own.
func clusterPlugins(node string, n publish.Node) []clusterPlugin {
	var out []clusterPlugin
	for ns, in := range n.Instances {
		byPlugin := map[string]map[string]string{}
		for name, v := range n.Attributes[ns] {
			if plugin, key, ok := publish.SplitKeyName(name); ok {
				if byPlugin[plugin] == nil {
					byPlugin[plugin] = map[string]string{}
				}
				byPlugin[plugin][key] = v
			}
		}
		for _, m := range in {
			typ, ok := m[publish.InstanceType]
			if !ok {
				continue // not one of wasmhost's
			}
			p := clusterPlugin{Node: node, Type: typ, Name: m[publish.InstanceName], State: m[publish.InstanceState],
				Socket: m[publish.InstanceSocket], Handler: m[publish.InstanceHandler], Published: map[string]string{}}
			if v := m[publish.InstanceVersions]; v != "" {
				p.Versions = strings.Split(v, ",")
			}
			if p.State == string(state.StateRegistered) {
				maps.Copy(p.Published, byPlugin[p.Name])
			}
			for k, v := range m {
				if !strings.HasPrefix(k, "wasmhost.dev/") {
					p.Published[k] = v
				}
			}
			out = append(out, p)
		}
	}
	return out
}

func writeClusterPlugins(w io.Writer, ps []clusterPlugin, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := "NODE\tTYPE\tNAME\tSTATE\tVERSIONS\tPUBLISHED"
	if wide {
		head += "\tSOCKET\tHANDLER"
	}
	fmt.Fprintln(tw, head)
	for _, p := range ps {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p.Published)) {
			kv = append(kv, k+"="+p.Published[k])
		}
		pub := strings.Join(kv, " ")
		if pub == "" {
			pub = "-"
		}
		if !wide {
			pub = cut(pub, 48)
		}
		line := strings.Join([]string{safeText(p.Node), safeText(p.Type), safeText(p.Name), safeText(p.State),
			safeText(cut(strings.Join(p.Versions, ","), 32)), safeText(pub)}, "\t")
		if wide {
			handler := p.Handler
			if handler == "" {
				handler = "-"
			}
			line += "\t" + safeText(p.Socket) + "\t" + safeText(handler)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func cut(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

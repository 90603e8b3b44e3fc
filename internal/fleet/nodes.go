package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// NodeTable reads the Nodes' Ready condition from the API server's table of Nodes, the
// STATUS column kubectl shows (Ready, NotReady, Unknown; ",SchedulingDisabled" is left
// off), without the objects: a row is about 150 bytes where a Node is 5–20 KiB (its images,
// its conditions), so 5,000 nodes are under a megabyte, read in pages. It needs list (or get,
// for a few named nodes) of nodes.
type NodeTable struct {
	client *http.Client
	base   *url.URL // …/api/v1/nodes
	// ChunkSize is the page size; 0 takes DefaultChunkSize.
	ChunkSize int64
}

// NewNodeTable returns a NodeTable of the API server cfg reaches.
func NewNodeTable(cfg *rest.Config) (*NodeTable, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, err
	}
	u = u.JoinPath("api", "v1", "nodes")
	return &NodeTable{client: hc, base: u}, nil
}

// tableAccept asks for a Table, as kubectl get does.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// askOneByOne: up to this many named nodes are read one request each; more, with the list.
const askOneByOne = 20

// Ready returns the Ready condition of the named nodes, or of every node.
func (t *NodeTable) Ready(ctx context.Context, names []string) (map[string]string, error) {
	out := map[string]string{}
	if len(names) > 0 && len(names) <= askOneByOne {
		for _, name := range names {
			tb, status, err := t.get(ctx, t.base.JoinPath(name), nil)
			if status == http.StatusNotFound {
				continue
			}
			if err != nil {
				return out, err
			}
			readyOf(tb, out)
		}
		return out, nil
	}
	q := url.Values{"limit": {strconv.FormatInt(cmpOr(t.ChunkSize, DefaultChunkSize), 10)}}
	for {
		tb, _, err := t.get(ctx, t.base, q)
		if err != nil {
			return out, err
		}
		readyOf(tb, out)
		if tb.Continue == "" {
			return out, nil
		}
		q.Set("continue", tb.Continue)
	}
}

func cmpOr(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// readyOf adds the rows of tb to out: name → the first word of STATUS.
func readyOf(tb *metav1.Table, out map[string]string) {
	name, status := -1, -1
	for i, c := range tb.ColumnDefinitions {
		switch c.Name {
		case "Name":
			name = i
		case "Status":
			status = i
		}
	}
	if name < 0 || status < 0 {
		return
	}
	for _, r := range tb.Rows {
		if len(r.Cells) <= max(name, status) {
			continue
		}
		n, _ := r.Cells[name].(string)
		s, _ := r.Cells[status].(string)
		s, _, _ = strings.Cut(s, ",")
		if n != "" {
			out[n] = s
		}
	}
}

// get reads a Table at u.
func (t *NodeTable) get(ctx context.Context, u *url.URL, q url.Values) (*metav1.Table, int, error) {
	all := url.Values{"includeObject": {"None"}}
	for k, v := range q {
		all[k] = v
	}
	u = &url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawQuery: all.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("reading Nodes: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return nil, resp.StatusCode, fmt.Errorf("reading Nodes: %s: %s", resp.Status, msg)
	}
	var tb metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&tb); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("reading Nodes: %w", err)
	}
	if tb.Kind != "Table" {
		return nil, resp.StatusCode, fmt.Errorf("reading Nodes: the API server answered a %q, not a Table", tb.Kind)
	}
	return &tb, resp.StatusCode, nil
}

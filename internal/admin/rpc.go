package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/safetext"
	"github.com/wasmhost/wasmhost/internal/session"
	"github.com/wasmhost/wasmhost/internal/state"
)

// rpcServer implements adminv1.AdminServer over a Server; it keeps the gRPC methods out of
// Server's API.
type rpcServer struct {
	adminv1.UnimplementedAdminServer
	s *Server
}

var _ adminv1.AdminServer = rpcServer{}

func (r rpcServer) ListPlugins(_ context.Context, req *adminv1.ListPluginsRequest) (*adminv1.ListPluginsResponse, error) {
	ps, next, err := page(r.s.cfg.Store.Plugins(), func(p state.PluginView) string { return p.Path },
		r.s.pluginToProto, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &adminv1.ListPluginsResponse{Plugins: ps, NextPageToken: next}, nil
}

// handlerKey orders the handlers and names one in a page token: its file, then its types
// (a built-in handler has no file).
func handlerKey(h state.Handler) string {
	return h.File + "\x00" + strings.Join(h.PluginTypes, "\x00")
}

func (r rpcServer) ListHandlers(_ context.Context, req *adminv1.ListHandlersRequest) (*adminv1.ListHandlersResponse, error) {
	hs := r.s.cfg.Store.Handlers()
	slices.SortFunc(hs, func(a, b state.Handler) int { return strings.Compare(handlerKey(a), handlerKey(b)) })
	out, next, err := page(hs, handlerKey, handlerToProto, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	return &adminv1.ListHandlersResponse{Handlers: out, NextPageToken: next}, nil
}

func (r rpcServer) GetStatus(context.Context, *adminv1.GetStatusRequest) (*adminv1.Status, error) {
	s := r.s
	ps := s.cfg.Store.Plugins()
	byState := make(map[string]uint32)
	for _, p := range ps {
		byState[string(p.State)]++
	}
	st := &adminv1.Status{
		Version:        s.cfg.Version,
		StartedAt:      timestamppb.New(s.started),
		Uptime:         durationpb.New(time.Since(s.started)),
		Ready:          true,
		Plugins:        uint32(len(ps)),
		PluginsByState: byState,
		Handlers:       uint32(len(s.cfg.Store.Handlers())),
		Watchers:       uint32(max(s.watchers.Load(), 0)),
	}
	if err := s.cfg.Ready(); err != nil {
		st.Ready = false
		st.NotReadyReason = err.Error()
	}
	if s.cfg.Publish != nil {
		ps := s.cfg.Publish()
		for _, k := range ps.Sinks {
			st.PublishSinks = append(st.PublishSinks, &adminv1.PublishSink{
				Sink: k.Sink, Target: text(k.Target), State: k.State, Writes: k.Writes, Failures: k.Failures,
				LastWrite: timeToProto(k.LastWrite), LastError: text(k.LastError),
				LastErrorAt: timeToProto(k.LastErrorAt), NextRetry: timeToProto(k.NextRetry),
				Labels: uint32(k.Labels), Attributes: uint32(k.Attributes), Instances: uint32(k.Instances), Holding: k.Holding,
			})
		}
		if e := ps.Events; e != nil {
			st.PublishEvents = &adminv1.PublishEvents{Recorded: e.Recorded, Dropped: e.Dropped, Failed: e.Failed,
				LastError: text(e.LastError), LastErrorAt: timeToProto(e.LastErrorAt)}
		}
		st.PublishRefused = uint32(ps.Refused)
		for _, r := range ps.Refusals {
			st.PublishRefusals = append(st.PublishRefusals, text(r.String()))
		}
	}
	h := state.HealthOf(s.cfg.Store.Handlers(), ps)
	st.HandlersServing, st.HandlersNotServing = uint32(h.Serving), uint32(len(h.NotServing))
	for _, w := range h.Waiting {
		st.TypesWithoutHandler = append(st.TypesWithoutHandler, &adminv1.TypeWithoutHandler{PluginType: text(w.PluginType), Plugins: uint32(w.Plugins)})
	}
	st.Problems = texts(s.cfg.Problems())
	return st, nil
}

func (r rpcServer) PullHandlers(ctx context.Context, _ *adminv1.PullHandlersRequest) (*adminv1.PullHandlersResponse, error) {
	if r.s.cfg.Pull == nil {
		return nil, status.Error(codes.FailedPrecondition, ErrNoSources.Error())
	}
	if err := r.s.cfg.Pull(ctx); err != nil {
		if errors.Is(err, ErrNoSources) {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		return nil, status.FromContextError(err).Err()
	}
	resp := &adminv1.PullHandlersResponse{}
	for _, h := range r.s.cfg.Store.Handlers() {
		if h.Source == state.SourceRegistry {
			resp.Handlers = append(resp.Handlers, handlerToProto(h))
		}
	}
	return resp, nil
}

// MaxCaptureAnswers bounds the CaptureSessions answers built at once: each holds the YAML of
// every session it returns, up to about 22 MB for a full ring (capture.MaxBytes), so clients
// that ask together wait for a slot instead of multiplying that. Two: `plugins capture --all`
// and one more beside it.
const MaxCaptureAnswers = 2

// CaptureSessions returns the sessions the daemon keeps, each as its YAML file.
func (r rpcServer) CaptureSessions(ctx context.Context, req *adminv1.CaptureSessionsRequest) (*adminv1.CaptureSessionsResponse, error) {
	if r.s.cfg.Capture == nil {
		return nil, status.Error(codes.FailedPrecondition, "capture is off (handlers.capture.sessions: 0)")
	}
	select {
	case r.s.captures <- struct{}{}:
		defer func() { <-r.s.captures }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	list, missing := r.s.cfg.Capture(req.GetNames())
	resp := &adminv1.CaptureSessionsResponse{Missing: missing}
	for _, s := range list {
		b, err := session.Marshal(s)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "session of %s: %v", s.Plugin.Socket, err)
		}
		resp.Sessions = append(resp.Sessions, &adminv1.CapturedSession{
			Socket: s.Plugin.Socket, PluginType: s.Plugin.Type, PluginName: s.Plugin.Name,
			CapturedAt: timestamppb.New(s.CapturedAt), Yaml: b,
		})
	}
	return resp, nil
}

// WatchPlugins sends the list as ADDED events, SYNCED, then every change as the store makes
// it, until the client goes or the server stops (UNAVAILABLE). A stream that fell so far
// behind that the store forgot removals it had not sent gets RESET and the list again.
func (r rpcServer) WatchPlugins(_ *adminv1.WatchPluginsRequest, stream grpc.ServerStreamingServer[adminv1.PluginEvent]) error {
	s := r.s
	s.watchers.Add(1)
	defer s.watchers.Add(-1)
	sub, list := s.cfg.Store.Subscribe()
	defer sub.Close()
	ctx := stream.Context()
	sendList := func(list []state.PluginView) error {
		now := timestamppb.Now()
		for _, p := range list {
			if err := stream.Send(&adminv1.PluginEvent{Type: adminv1.EventType_EVENT_TYPE_ADDED, Plugin: r.s.pluginToProto(p), Time: now}); err != nil {
				return err
			}
		}
		return stream.Send(&adminv1.PluginEvent{Type: adminv1.EventType_EVENT_TYPE_SYNCED, Time: now})
	}
	if err := sendList(list); err != nil {
		return err
	}
	for {
		select {
		case <-sub.C():
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopping:
			return status.Error(codes.Unavailable, "the wasmhost daemon is shutting down")
		}
		changes, reset, list := sub.Next()
		if reset {
			s.resets.Add(1)
			s.log.Debug("admin API: a watcher fell behind; sending RESET and the list again")
			if err := stream.Send(&adminv1.PluginEvent{
				Type:   adminv1.EventType_EVENT_TYPE_RESET,
				Time:   timestamppb.Now(),
				Reason: "the watch fell so far behind the daemon's changes that removals were forgotten; forget what you hold, a fresh list follows",
			}); err != nil {
				return err
			}
			if err := sendList(list); err != nil {
				return err
			}
			continue
		}
		now := timestamppb.Now()
		for _, c := range changes {
			if err := stream.Send(&adminv1.PluginEvent{Type: eventType(c.Type), Plugin: r.s.pluginToProto(c.View), Time: now}); err != nil {
				return err
			}
		}
	}
}

func eventType(t state.ChangeType) adminv1.EventType {
	switch t {
	case state.Added:
		return adminv1.EventType_EVENT_TYPE_ADDED
	case state.Deleted:
		return adminv1.EventType_EVENT_TYPE_DELETED
	default:
		return adminv1.EventType_EVENT_TYPE_MODIFIED
	}
}

func (s *Server) pluginToProto(p state.PluginView) *adminv1.Plugin {
	var notPublished []string
	if s.cfg.NotPublished != nil {
		notPublished = texts(s.cfg.NotPublished(p.Path))
	}
	return &adminv1.Plugin{
		NotPublished:   notPublished,
		Socket:         text(p.Path),
		Type:           text(p.PluginType),
		Name:           text(p.PluginName),
		Endpoint:       text(p.Endpoint),
		Versions:       texts(p.PluginVersions),
		State:          stateToProto(p.State),
		LastError:      text(p.LastError),
		Attempts:       uint32(max(p.Attempts, 0)),
		NextRetry:      timeToProto(p.NextRetry),
		LastTransition: timeToProto(p.Since),
		HandlerFile:    text(p.HandlerFile),
		HandlerSha256:  p.HandlerSHA256,
		Published:      textMap(p.Published),
		RegisteredAt:   timeToProto(p.RegisteredAt),
		Kubelet:        kubeletToProto(p.Kubelet),
	}
}

func kubeletToProto(k state.Kubelet) *adminv1.KubeletStatus {
	if k == (state.Kubelet{}) {
		return nil
	}
	st := adminv1.KubeletState_KUBELET_STATE_UNSPECIFIED
	switch k.State {
	case state.KubeletPending:
		st = adminv1.KubeletState_KUBELET_STATE_PENDING
	case state.KubeletRegistered:
		st = adminv1.KubeletState_KUBELET_STATE_REGISTERED
	case state.KubeletRefused:
		st = adminv1.KubeletState_KUBELET_STATE_REFUSED
	case state.KubeletTimeout:
		st = adminv1.KubeletState_KUBELET_STATE_TIMEOUT
	}
	return &adminv1.KubeletStatus{State: st, Error: text(k.Error), Socket: text(k.Socket), Since: timeToProto(k.Since)}
}

func handlerToProto(h state.Handler) *adminv1.Handler {
	return &adminv1.Handler{
		PluginTypes:  texts(h.PluginTypes),
		File:         text(h.File),
		Sha256:       h.SHA256,
		Size:         h.Size,
		AbiVersion:   h.ABIVersion,
		Capabilities: h.Capabilities,
		LoadedAt:     timeToProto(h.LoadedAt),
		PoolSize:     uint32(max(h.PoolSize, 0)),
		Calls:        h.Counters.Calls,
		Failures:     h.Counters.Failures,
		Traps:        h.Counters.Traps,
		Timeouts:     h.Counters.Timeouts,
		Cpu:          durationpb.New(h.Counters.CPU),
		Throttled:    durationpb.New(h.Counters.Throttled),
		LastError:    text(h.LastError),
		LastErrorAt:  timeToProto(h.LastErrorAt),
		GoneSince:    timeToProto(h.GoneSince),

		Quarantined:      h.Counters.Quarantined,
		QuarantinedUntil: timeToProto(h.Counters.QuarantinedUntil),
		QuarantineReason: text(h.Counters.QuarantineReason),
		Quarantines:      h.Counters.Quarantines,
		FastFailed:       h.Counters.FastFailed,
		KvKeys:           uint64(max(h.Counters.KVKeys, 0)),
		KvBytes:          uint64(max(h.Counters.KVBytes, 0)),

		Name:    text(h.Name),
		Version: text(h.Version),
		Pins:    pinsToProto(h.Pins),
		Shadows: shadowsToProto(h.Counters.Shadows),

		Serving: h.Serving,
		Reason:  text(h.Reason),
		Source:  h.Source,
	}
}

func stateToProto(s state.PluginState) adminv1.PluginState {
	switch s {
	case state.StatePending:
		return adminv1.PluginState_PLUGIN_STATE_PENDING
	case state.StateRegistered:
		return adminv1.PluginState_PLUGIN_STATE_REGISTERED
	case state.StateFailing:
		return adminv1.PluginState_PLUGIN_STATE_FAILING
	case state.StateWaitingForHandler:
		return adminv1.PluginState_PLUGIN_STATE_WAITING_FOR_HANDLER
	case state.StateGone:
		return adminv1.PluginState_PLUGIN_STATE_GONE
	case state.StateRejected:
		return adminv1.PluginState_PLUGIN_STATE_REJECTED
	case state.StateStandby:
		return adminv1.PluginState_PLUGIN_STATE_STANDBY
	default:
		return adminv1.PluginState_PLUGIN_STATE_UNSPECIFIED
	}
}

// timeToProto leaves the zero time absent.
func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// text makes s fit a protobuf string, which must be UTF-8 (a message with one that is not
// cannot be sent, and the whole list would fail): a socket or file name is any bytes, a
// handler publishes what it likes. Valid text is passed exactly; other text is escaped by the
// daemon's one policy for untrusted text (package safetext).
func text(s string) string { return safetext.UTF8(s) }

func texts(ss []string) []string { return safetext.UTF8All(ss) }

func textMap(m map[string]string) map[string]string {
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			out := make(map[string]string, len(m))
			for k, v := range m {
				out[text(k)] = text(v)
			}
			return out
		}
	}
	return m
}

package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// watcher is one WatchPlugins stream's place in the fan-out. Its fields other than the
// channels are guarded by Server.mu.
type watcher struct {
	events   chan *adminv1.PluginEvent
	overflow chan struct{} // closed when the watcher was dropped for falling behind
	dropped  bool
}

// rpcServer implements adminv1.AdminServer over a Server; it keeps the gRPC methods out of
// Server's API.
type rpcServer struct {
	adminv1.UnimplementedAdminServer
	s *Server
}

var _ adminv1.AdminServer = rpcServer{}

func (r rpcServer) ListPlugins(context.Context, *adminv1.ListPluginsRequest) (*adminv1.ListPluginsResponse, error) {
	ps := sortedPlugins(r.s.cfg.Source.Plugins())
	out := &adminv1.ListPluginsResponse{Plugins: make([]*adminv1.Plugin, 0, len(ps))}
	for _, p := range ps {
		out.Plugins = append(out.Plugins, pluginToProto(p))
	}
	return out, nil
}

func (r rpcServer) ListHandlers(context.Context, *adminv1.ListHandlersRequest) (*adminv1.ListHandlersResponse, error) {
	hs := slices.Clone(r.s.cfg.Source.Handlers())
	slices.SortFunc(hs, func(a, b Handler) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return slices.Compare(a.PluginTypes, b.PluginTypes)
	})
	out := &adminv1.ListHandlersResponse{Handlers: make([]*adminv1.Handler, 0, len(hs))}
	for _, h := range hs {
		out.Handlers = append(out.Handlers, handlerToProto(h))
	}
	return out, nil
}

func (r rpcServer) GetStatus(context.Context, *adminv1.GetStatusRequest) (*adminv1.Status, error) {
	s := r.s
	ps := s.cfg.Source.Plugins()
	st := &adminv1.Status{
		Version:        s.cfg.Version,
		StartedAt:      timestamppb.New(s.started),
		Uptime:         durationpb.New(time.Since(s.started)),
		Ready:          true,
		Plugins:        uint32(len(ps)),
		PluginsByState: countByState(ps),
		Handlers:       uint32(len(s.cfg.Source.Handlers())),
	}
	if err := s.cfg.Source.Ready(); err != nil {
		st.Ready = false
		st.NotReadyReason = err.Error()
	}
	s.mu.Lock()
	st.Watchers = uint32(len(s.watchers))
	s.mu.Unlock()
	return st, nil
}

// errFellBehind ends one round of a watch: the watcher was dropped and starts over.
var errFellBehind = errors.New("admin: watcher fell behind")

func (r rpcServer) WatchPlugins(_ *adminv1.WatchPluginsRequest, stream grpc.ServerStreamingServer[adminv1.PluginEvent]) error {
	s := r.s
	for {
		w, list := s.subscribe()
		err := s.serveWatch(stream, w, list)
		s.unsubscribe(w)
		if !errors.Is(err, errFellBehind) {
			return err
		}
		s.log.Debug("admin API: a watcher fell behind; sending RESET and the list again",
			"buffer", s.cfg.WatchBuffer)
		reset := &adminv1.PluginEvent{
			Type:   adminv1.EventType_EVENT_TYPE_RESET,
			Time:   timestamppb.Now(),
			Reason: "the watch fell behind the daemon's changes and events were dropped; forget what you hold, a fresh list follows",
		}
		if err := stream.Send(reset); err != nil {
			return err
		}
	}
}

// serveWatch sends list as ADDED events, SYNCED, then w's events until the client goes, the
// server stops (UNAVAILABLE) or w falls behind (errFellBehind).
func (s *Server) serveWatch(stream grpc.ServerStreamingServer[adminv1.PluginEvent], w *watcher, list []Plugin) error {
	ctx := stream.Context()
	now := timestamppb.Now()
	for _, p := range list {
		if err := stream.Send(&adminv1.PluginEvent{Type: adminv1.EventType_EVENT_TYPE_ADDED, Plugin: pluginToProto(p), Time: now}); err != nil {
			return err
		}
	}
	if err := stream.Send(&adminv1.PluginEvent{Type: adminv1.EventType_EVENT_TYPE_SYNCED, Time: now}); err != nil {
		return err
	}
	for {
		// A watcher that fell behind starts over at once: what is still queued for it would
		// be thrown away by the RESET anyway.
		select {
		case <-w.overflow:
			return errFellBehind
		default:
		}
		select {
		case ev := <-w.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-w.overflow:
			return errFellBehind
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopping:
			return status.Error(codes.Unavailable, "the wasmhost daemon is shutting down")
		}
	}
}

func (s *Server) subscribe() (*watcher, []Plugin) {
	w := &watcher{
		events:   make(chan *adminv1.PluginEvent, s.cfg.WatchBuffer),
		overflow: make(chan struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers[w] = struct{}{}
	return w, s.snapshotLocked()
}

func (s *Server) unsubscribe(w *watcher) {
	s.mu.Lock()
	delete(s.watchers, w)
	s.mu.Unlock()
}

func pluginToProto(p Plugin) *adminv1.Plugin {
	return &adminv1.Plugin{
		Socket:         p.Socket,
		Type:           p.Type,
		Name:           p.Name,
		Endpoint:       p.Endpoint,
		Versions:       p.Versions,
		State:          stateToProto(p.State),
		LastError:      p.LastError,
		Attempts:       uint32(max(p.Attempts, 0)),
		NextRetry:      timeToProto(p.NextRetry),
		LastTransition: timeToProto(p.LastTransition),
		HandlerFile:    p.HandlerFile,
		HandlerSha256:  p.HandlerSHA256,
		Published:      p.Published,
		RegisteredAt:   timeToProto(p.RegisteredAt),
	}
}

func handlerToProto(h Handler) *adminv1.Handler {
	return &adminv1.Handler{
		PluginTypes:  h.PluginTypes,
		File:         h.File,
		Sha256:       h.SHA256,
		Size:         h.Size,
		AbiVersion:   h.ABIVersion,
		Capabilities: h.Capabilities,
		LoadedAt:     timeToProto(h.LoadedAt),
		PoolSize:     uint32(max(h.PoolSize, 0)),
		Calls:        h.Calls,
		Failures:     h.Failures,
		Traps:        h.Traps,
		Timeouts:     h.Timeouts,
		LastError:    h.LastError,
	}
}

func stateToProto(s PluginState) adminv1.PluginState {
	switch s {
	case StatePending:
		return adminv1.PluginState_PLUGIN_STATE_PENDING
	case StateRegistered:
		return adminv1.PluginState_PLUGIN_STATE_REGISTERED
	case StateFailing:
		return adminv1.PluginState_PLUGIN_STATE_FAILING
	case StateWaitingForHandler:
		return adminv1.PluginState_PLUGIN_STATE_WAITING_FOR_HANDLER
	case StateGone:
		return adminv1.PluginState_PLUGIN_STATE_GONE
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

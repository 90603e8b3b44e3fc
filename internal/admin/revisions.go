package admin

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/state"
)

// The revisions of a plugin type's handler: the history from the store, the changes (rollback,
// pin, shadow) through Config.Control.

func (r rpcServer) ListRevisions(_ context.Context, req *adminv1.ListRevisionsRequest) (*adminv1.ListRevisionsResponse, error) {
	if req.GetPluginType() == "" {
		return nil, status.Error(codes.InvalidArgument, "plugin_type is required")
	}
	h, ok := r.s.cfg.Store.History(req.GetPluginType())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no revision of a handler of plugin type %s is known (see: wasmhost handlers)", text(req.GetPluginType()))
	}
	out := &adminv1.ListRevisionsResponse{PluginType: text(h.PluginType), Pin: pinToProto(h.Pin), Shadow: shadowToProto(h.Shadow)}
	for _, rev := range h.Revisions {
		out.Revisions = append(out.Revisions, revisionToProto(rev))
	}
	return out, nil
}

func (r rpcServer) Rollback(ctx context.Context, req *adminv1.RollbackRequest) (*adminv1.RollbackResponse, error) {
	c, err := r.control(req.GetPluginType())
	if err != nil {
		return nil, err
	}
	rev, err := c.Rollback(ctx, req.GetPluginType(), req.GetSha256())
	if err != nil {
		return nil, controlError(err)
	}
	return &adminv1.RollbackResponse{Revision: revisionToProto(rev)}, nil
}

func (r rpcServer) ClearPin(ctx context.Context, req *adminv1.ClearPinRequest) (*adminv1.ClearPinResponse, error) {
	c, err := r.control(req.GetPluginType())
	if err != nil {
		return nil, err
	}
	if err := c.ClearPin(ctx, req.GetPluginType()); err != nil {
		return nil, controlError(err)
	}
	return &adminv1.ClearPinResponse{}, nil
}

func (r rpcServer) SetShadow(ctx context.Context, req *adminv1.SetShadowRequest) (*adminv1.SetShadowResponse, error) {
	c, err := r.control(req.GetPluginType())
	if err != nil {
		return nil, err
	}
	sh, err := c.SetShadow(ctx, req.GetPluginType(), req.GetCandidate())
	if err != nil {
		return nil, controlError(err)
	}
	return &adminv1.SetShadowResponse{Shadow: shadowToProto(sh)}, nil
}

func (r rpcServer) control(pluginType string) (Control, error) {
	if r.s.cfg.Control == nil {
		return nil, status.Error(codes.Unimplemented, "this daemon does not change handler revisions")
	}
	if pluginType == "" {
		return nil, status.Error(codes.InvalidArgument, "plugin_type is required")
	}
	return r.s.cfg.Control, nil
}

// controlError gives a Control error its gRPC code; the message is the error's, which names the
// type, the revision and what is wrong.
func controlError(err error) error {
	code := codes.FailedPrecondition
	switch {
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, text(err.Error()))
}

func revisionToProto(r state.Revision) *adminv1.Revision {
	return &adminv1.Revision{
		Sha256: r.SHA256, File: text(r.File), Name: text(r.Name), Version: text(r.Version),
		PluginTypes: texts(r.PluginTypes), Size: r.Size, FirstLoaded: timeToProto(r.FirstLoaded),
		Calls: r.Calls, Failures: r.Failures, Traps: r.Traps, Timeouts: r.Timeouts,
		Serving: r.Serving, Pinned: r.Pinned, InFile: r.InFile, RolledBack: text(r.RolledBack),
	}
}

func pinToProto(p *state.Pin) *adminv1.Pin {
	if p == nil {
		return nil
	}
	return &adminv1.Pin{PluginType: text(p.PluginType), Sha256: p.SHA256, FileSha256: p.FileSHA256,
		Auto: p.Auto, Reason: text(p.Reason), Since: timeToProto(p.At)}
}

func shadowToProto(s *state.Shadow) *adminv1.Shadow {
	if s == nil {
		return nil
	}
	return &adminv1.Shadow{PluginType: text(s.PluginType), Sha256: s.SHA256, File: text(s.File),
		Name: text(s.Name), Version: text(s.Version), Since: timeToProto(s.Since), Runs: s.Runs,
		Disagreements: s.Disagreements, Failures: s.Failures, LastDisagreement: text(s.LastDisagreement),
		Skipped: s.Skipped}
}

// pinsToProto and shadowsToProto are a handler's.
func pinsToProto(ps []state.Pin) []*adminv1.Pin {
	var out []*adminv1.Pin
	for i := range ps {
		out = append(out, pinToProto(&ps[i]))
	}
	return out
}

func shadowsToProto(ss []state.Shadow) []*adminv1.Shadow {
	var out []*adminv1.Shadow
	for i := range ss {
		out = append(out, shadowToProto(&ss[i]))
	}
	return out
}

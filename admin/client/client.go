// Package client connects to a running wasmhost daemon's admin API, the gRPC service
// wasmhost.admin.v1.Admin (package adminv1), on the daemon's admin unix socket. It is what the
// wasmhost command line uses for plugins, handlers, watch and status, and what a program of
// your own can use to ask a daemon the same:
//
//	c, err := client.Dial(client.DefaultSocketPath)
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	plugins, err := client.ListAllPlugins(ctx, c)
//
// Lists come in pages (ListPluginsRequest.page_token); ListAllPlugins and ListAllHandlers ask
// for every page.
//
// The errors of a Client's calls say what is wrong and what to do rather than what gRPC saw:
// a socket that nobody listens on is ErrNotRunning ("no daemon is listening on …: is wasmhost
// running?"), a socket the caller may not open is ErrPermissionDenied, naming the user who may.
// They keep the gRPC status of the call, so status.Code and status.FromError work on them as on
// any gRPC error, and a stream's end is io.EOF as usual.
//
// The admin socket is mode 0600: only the daemon's user (usually root) may connect.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
)

// DefaultSocketPath is where the daemon serves the admin API unless its configuration says
// otherwise (admin.socket, or <stateDir>/admin.sock).
const DefaultSocketPath = "/var/lib/wasmhost/admin.sock"

// Errors a call may match with errors.Is. The error itself says which socket and what to do.
var (
	// ErrNotRunning: no daemon listens on the socket (it does not exist, or nobody accepts on
	// it).
	ErrNotRunning = errors.New("client: no daemon is listening on the admin socket")
	// ErrPermissionDenied: the caller may not connect to the socket; it is the daemon user's.
	ErrPermissionDenied = errors.New("client: permission denied on the admin socket")
)

// Client is a connection to a daemon's admin API. Its methods are those of adminv1.AdminClient;
// their errors are explained (see the package documentation). It is safe for concurrent use.
type Client struct {
	adminv1.AdminClient

	socket  string
	conn    *grpc.ClientConn
	dialErr atomic.Pointer[error] // why the last connection attempt failed
}

// MaxMessageSize is the largest answer the client takes. A page of a list is cut at about
// 1 MiB, but holds at least one entry, and one plugin may carry up to 4 MiB of published
// values (the ABI's 64 keys of 64 KiB).
const MaxMessageSize = 256 << 20

// Dial returns a client of the daemon whose admin socket is socketPath. It does not connect
// yet: the first call does, and fails with an explained error if no daemon is there. Close it
// when done.
func Dial(socketPath string) (*Client, error) {
	if socketPath == "" {
		return nil, errors.New("client: the admin socket path is empty")
	}
	c := &Client{socket: socketPath}
	conn, err := grpc.NewClient("passthrough:///wasmhost-admin",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// One plugin whose handler publishes the ABI's 64 keys of 64 KiB goes past gRPC's
		// default 4 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
			if err != nil {
				c.dialErr.Store(&err)
			} else {
				c.dialErr.Store(nil)
			}
			return conn, err
		}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return c.explain(ctx, invoker(ctx, method, req, reply, cc, opts...))
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, c.explain(ctx, err)
			}
			return explainedStream{s, c}, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", socketPath, err)
	}
	c.conn, c.AdminClient = conn, adminv1.NewAdminClient(conn)
	return c, nil
}

// SocketPath is the admin socket the client connects to.
func (c *Client) SocketPath() string { return c.socket }

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// explainedStream explains the errors of a stream's messages, and leaves its end (io.EOF) be.
type explainedStream struct {
	grpc.ClientStream
	c *Client
}

func (s explainedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return s.c.explain(s.Context(), err)
}

// explained is an error with a message for a person, wrapping what it explains: the gRPC
// error (so that status.Code still works) and a sentinel when there is one.
type explained struct {
	msg  string
	errs []error
}

func (e *explained) Error() string   { return e.msg }
func (e *explained) Unwrap() []error { return e.errs }

// explain turns the error of a call made with ctx into one that says what is wrong and what to
// do.
func (c *Client) explain(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var done *explained
	if errors.As(err, &done) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return &explained{fmt.Sprintf("admin socket %s: %v", c.socket, err), []error{err}}
	}
	if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled {
		// The caller stopped waiting: the daemon did not answer, whatever it would have said.
		// The daemon gets the caller's deadline and may see it pass a moment before the caller.
		ctxErr := ctx.Err()
		if _, ok := ctx.Deadline(); ok && ctxErr == nil && st.Code() == codes.DeadlineExceeded {
			ctxErr = context.DeadlineExceeded
		}
		if ctxErr != nil {
			return &explained{fmt.Sprintf("no answer from the daemon at %s: %v", c.socket, ctxErr), []error{ctxErr, err}}
		}
	}
	if p := c.dialErr.Load(); p != nil && st.Code() == codes.Unavailable {
		e := explainDialError(c.socket, *p)
		e.errs = append(e.errs, err)
		return e
	}
	return &explained{fmt.Sprintf("the daemon at %s answered: %s: %s", c.socket, st.Code(), st.Message()), []error{err}}
}

// explainDialError says why connecting to the socket failed and what to do about it.
func explainDialError(socket string, err error) *explained {
	switch {
	case errors.Is(err, syscall.ENOTSOCK), errors.Is(err, syscall.ECONNREFUSED) && !isSocket(socket):
		return &explained{fmt.Sprintf("%s is not a socket: is the admin socket path right?", socket), []error{err}}
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return &explained{fmt.Sprintf("no daemon is listening on %s: is wasmhost running? (start it with wasmhost run)", socket),
			[]error{ErrNotRunning, err}}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		who := "the user the daemon runs as"
		if owner := fileOwner(socket); owner != "" {
			who = owner + ", who owns it"
		}
		return &explained{fmt.Sprintf("permission denied on %s: the admin socket is for the daemon's user only; run this as root or as %s", socket, who),
			[]error{ErrPermissionDenied, err}}
	default:
		return &explained{fmt.Sprintf("cannot connect to the daemon at %s: %v", socket, err), []error{err}}
	}
}

// isSocket reports whether path is a socket; Linux refuses a connection to a file that is not
// one as it refuses one to a socket nobody listens on.
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// fileOwner names the owner of path (its user name, or uid N), or "" when it cannot tell.
func fileOwner(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		// A directory on the way may be what refused us; name its owner instead.
		fi, err = os.Stat(filepath.Dir(path))
		if err != nil {
			return ""
		}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	uid := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return "uid " + uid
}

package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// SocketPath is the path of a unix:///PATH (or unix:/PATH) endpoint.
func SocketPath(endpoint string) (string, error) {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		p, ok = strings.CutPrefix(endpoint, "unix:")
	}
	if !ok || !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("endpoint %q: want unix:///ABSOLUTE/PATH", endpoint)
	}
	return p, nil
}

// Listen listens on the unix socket path, first removing a socket nobody
// answers on (left by a plugin that crashed). A socket that answers, or a
// path that is no socket, is an error.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another process serves it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: remove stale socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// StopTimeout bounds GracefulStop: calls still running after it are cut.
const StopTimeout = 10 * time.Second

// Serve serves identity and, when not nil, controller and node on l until ctx
// ends, then stops gracefully (at most StopTimeout) and removes the socket.
func Serve(ctx context.Context, l net.Listener, identity *Identity, controller *Controller, node *Node, log zerolog.Logger) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		ev := log.Debug()
		if err != nil {
			ev = log.Info().Str("code", status.Code(err).String()).Str("error", status.Convert(err).Message())
		}
		ev.Str("call", info.FullMethod).Dur("took", time.Since(start)).Msg("csi call")
		return resp, err
	}))
	csipb.RegisterIdentityServer(srv, identity)
	if controller != nil {
		csipb.RegisterControllerServer(srv, controller)
	}
	if node != nil {
		csipb.RegisterNodeServer(srv, node)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info().Str("socket", l.Addr().String()).Bool("controller", controller != nil).Msg("serving CSI")
	select {
	case err := <-done:
		return fmt.Errorf("serve CSI: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(StopTimeout):
		log.Warn().Dur("after", StopTimeout).Msg("CSI calls still running: cut")
		srv.Stop()
		<-stopped
	}
	if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve CSI: %w", err)
	}
	log.Info().Msg("CSI server stopped")
	return nil
}

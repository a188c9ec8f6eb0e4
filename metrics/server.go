package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where a Server serves the metrics.
const Path = "/metrics"

// NewRegistry returns a registry holding c and the Go runtime's and this
// process's standard collectors.
func NewRegistry(c *Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, col := range []prometheus.Collector{c, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Server serves Path over HTTP on a listener, in its own goroutine.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
	err  error
	once sync.Once
}

// Serve starts serving g's metrics on ln at Path. It owns ln: Close closes
// it.
func Serve(ln net.Listener, g prometheus.Gatherer) *Server {
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{Timeout: 10 * time.Second}))
	s := &Server{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 20 * time.Second, IdleTimeout: 60 * time.Second},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Addr is the address served.
func (s *Server) Addr() net.Addr { return s.addr }

// Done is closed when the server stopped (Close, or the listener failed).
func (s *Server) Done() <-chan struct{} { return s.done }

// Close stops the server: it lets scrapes in progress finish for up to 2 s,
// then closes their connections, and waits for the serving goroutine. It
// returns why serving stopped early, if it did. Idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
	})
	<-s.done
	return s.err
}

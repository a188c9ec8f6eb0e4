package nbd_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/iser-attach/iser-attach/nbd"
	"github.com/iser-attach/iser-attach/nbd/nbdtest"
	"github.com/rs/zerolog"
)

// Serving one export on a Unix socket until SIGINT, then draining in-flight
// requests for up to ten seconds. A real caller passes a LUN as the Backend.
func Example() {
	lun := nbdtest.NewMemory(nbdtest.Config{Size: 1 << 30, BlockSize: 512})
	srv, err := nbd.NewServer([]nbd.Export{{Name: "lun0", Description: "demo", Backend: lun}},
		nbd.Options{Logger: zerolog.New(os.Stderr)})
	if err != nil {
		log.Fatal(err)
	}
	l, err := nbd.Listen("unix:/run/iser-attach/lun0.sock")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		drain, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(drain) // falls back to Close when drain expires
	}()
	if err := srv.Serve(context.Background(), l); err != nil && err != nbd.ErrServerClosed {
		log.Fatal(err)
	}
	// Clients connect with e.g. nbd+unix:///lun0?socket=/run/iser-attach/lun0.sock
}

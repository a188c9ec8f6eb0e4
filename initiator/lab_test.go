package initiator_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iser-attach/iser-attach/initiator"
)

// Tests against a real target in the VM lab (scripts/vmlab/tests/6*-iser-attach*.sh).
// They run only when ISER_LAB_PORTAL is set; the lab sets it and requires them to pass.
//
//	ISER_LAB_PORTAL     host:port          ISER_LAB_TARGET  IQN
//	ISER_LAB_TRANSPORT  iser | tcp         ISER_LAB_LUNS    comma list, e.g. 0,1
//	ISER_LAB_CHAP_USER / _SECRET, ISER_LAB_MUTUAL_USER / _SECRET
//	ISER_LAB_EXPECT     ok (default) | auth-failed

func labConfig(t *testing.T) (portal, target, transport string, luns []uint16, creds *initiator.CHAPCredentials) {
	portal = os.Getenv("ISER_LAB_PORTAL")
	if portal == "" {
		t.Skip("runs in the VM lab (ISER_LAB_PORTAL unset)")
	}
	target = os.Getenv("ISER_LAB_TARGET")
	transport = os.Getenv("ISER_LAB_TRANSPORT")
	for _, s := range strings.Split(os.Getenv("ISER_LAB_LUNS"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("ISER_LAB_LUNS %q: %v", os.Getenv("ISER_LAB_LUNS"), err)
		}
		luns = append(luns, uint16(n))
	}
	if u := os.Getenv("ISER_LAB_CHAP_USER"); u != "" {
		creds = &initiator.CHAPCredentials{User: u, Secret: []byte(os.Getenv("ISER_LAB_CHAP_SECRET")),
			MutualUser: os.Getenv("ISER_LAB_MUTUAL_USER")}
		if m := os.Getenv("ISER_LAB_MUTUAL_SECRET"); m != "" {
			creds.MutualSecret = []byte(m)
		}
	}
	return
}

func labLogin(t *testing.T, ctx context.Context) (*initiator.Session, []uint16, error) {
	portal, target, transport, luns, creds := labConfig(t)
	dm, err := initiator.DialDatamover(ctx, initiator.DialConfig{Transport: transport, Addr: portal, QueueDepth: 32})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if dm.Transport() != transport {
		t.Fatalf("transport %s, asked for %s", dm.Transport(), transport)
	}
	s, err := initiator.NewSession(ctx, dm, initiator.SessionConfig{LoginConfig: initiator.LoginConfig{
		InitiatorName: "iqn.2026-11.io.iser-attach:lab", TargetName: target, ISID: initiator.NewISID(), CHAP: creds},
		QueueDepth: 32})
	return s, luns, err
}

func TestLabLogin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, _, err := labLogin(t, ctx)
	if os.Getenv("ISER_LAB_EXPECT") == "auth-failed" {
		if !errors.Is(err, initiator.ErrAuthFailed) {
			t.Fatalf("login with a wrong secret: %v, want an authentication failure", err)
		}
		t.Logf("refused as expected: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("logged in over %s: %+v", s.Transport(), s.Params())
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLabReadWrite writes random data from one block to 512 KiB at many
// offsets on every LUN and reads it back, with bounce buffers and (over
// iSER) buffers in the registered region.
func TestLabReadWrite(t *testing.T) {
	if os.Getenv("ISER_LAB_EXPECT") == "auth-failed" {
		t.Skip("login is expected to fail")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	s, luns, err := labLogin(t, ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, n := range luns {
		l, err := initiator.OpenLUN(ctx, s, n)
		if err != nil {
			t.Fatal(err)
		}
		info := l.Info()
		t.Logf("LUN %d: %d x %d bytes, %s %s, wwn %s", n, info.Blocks, info.BlockSize, info.Vendor, info.Product, info.WWN)
		bs := int(info.BlockSize)
		maxBlocks := initiator.MaxTransfer / bs
		sizes := []int{1, 2, 3, 7, 8, 9, 31, 64, 127, 128, maxBlocks - 1, maxBlocks}
		offsets := []int64{0, 1, 7, 8, 255, 1023, int64(info.Blocks) - int64(maxBlocks)}
		for _, nb := range sizes {
			for _, ob := range offsets {
				if ob+int64(nb) > int64(info.Blocks) {
					continue
				}
				data := make([]byte, nb*bs)
				rand.Read(data)
				off := ob * int64(bs)
				if err := l.WriteAt(ctx, data, off, nb%2 == 1); err != nil {
					t.Fatalf("LUN %d write %d blocks at block %d: %v", n, nb, ob, err)
				}
				back := make([]byte, len(data))
				if err := l.ReadAt(ctx, back, off); err != nil {
					t.Fatalf("LUN %d read %d blocks at block %d: %v", n, nb, ob, err)
				}
				if !bytes.Equal(back, data) {
					t.Fatalf("LUN %d: %d blocks at block %d read back differently", n, nb, ob)
				}
			}
		}
		if err := l.Flush(ctx); err != nil {
			t.Fatalf("LUN %d flush: %v", n, err)
		}
	}
}

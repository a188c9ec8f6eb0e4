package rdma

import (
	"strings"
	"testing"
)

func TestDialOptionsDefaults(t *testing.T) {
	o := DialOptions{}.withDefaults()
	if o.SendDepth != DefaultSendDepth || o.RecvDepth != DefaultRecvDepth ||
		o.MaxSendSGE != DefaultMaxSendSGE || o.MaxRecvSGE != DefaultMaxRecvSGE {
		t.Fatalf("defaults not applied: %+v", o)
	}
	o = DialOptions{SendDepth: 7, MaxRecvSGE: 2}.withDefaults()
	if o.SendDepth != 7 || o.MaxRecvSGE != 2 {
		t.Fatalf("explicit values overwritten: %+v", o)
	}
}

func TestDialOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    DialOptions
		want string
	}{
		{DialOptions{PrivateData: make([]byte, 56)}, ""},
		{DialOptions{PrivateData: make([]byte, 57)}, "private data of 57 bytes exceeds 56"},
		{DialOptions{ResponderResources: 256}, "responder resources 256"},
		{DialOptions{InitiatorDepth: -1}, "initiator depth -1"},
		{DialOptions{SendDepth: -1}, "negative"},
	} {
		err := tc.o.validate(maxReqPrivateData)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.o, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want error containing %q", tc.o, err, tc.want)
		}
	}
}

func TestStrings(t *testing.T) {
	if got := WCWRFlushErr.String(); got != "Work Request Flushed Error" {
		t.Errorf("WCWRFlushErr = %q", got)
	}
	if got := WCStatus(99).String(); got != "unknown" {
		t.Errorf("WCStatus(99) = %q", got)
	}
	if got := CMEventTimewaitExit.String(); got != "RDMA_CM_EVENT_TIMEWAIT_EXIT" {
		t.Errorf("CMEventTimewaitExit = %q", got)
	}
	if got := CMEvent(42).String(); got != "RDMA_CM_EVENT(42)" {
		t.Errorf("CMEvent(42) = %q", got)
	}
	if got := OpRDMARead.String(); got != "RDMA_READ" {
		t.Errorf("OpRDMARead = %q", got)
	}
	e := &CMEventError{Event: CMEventUnreachable, Status: -110}
	if !strings.Contains(e.Error(), "RDMA_CM_EVENT_UNREACHABLE") || !strings.Contains(e.Error(), "timed out") {
		t.Errorf("CMEventError = %q", e.Error())
	}
	c := Completion{ID: 5, Op: OpRecv, Status: WCRNRRetryExcErr}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "RNR retry counter exceeded") {
		t.Errorf("Completion.Err = %v", err)
	}
	if err := (&Completion{}).Err(); err != nil {
		t.Errorf("successful Completion.Err = %v", err)
	}
}

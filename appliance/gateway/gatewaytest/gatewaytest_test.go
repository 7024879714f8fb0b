package gatewaytest

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestBreakListenerFailsAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	BreakListener(t, ln.Addr().String())
	select {
	case err := <-accepted:
		if err == nil || errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept = %v, want a failure other than a close", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked")
	}
}

func TestFreePortCanBeBound(t *testing.T) {
	port := FreePort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("FreePort = %d", port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("binding the port FreePort returned: %v", err)
	}
	ln.Close()
}

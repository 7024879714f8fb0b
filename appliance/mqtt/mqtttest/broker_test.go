package mqtttest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestBrokerKeepsRetainedAcrossRestart: the broker the tests rely on
// checks passwords, applies the ACL, and keeps retained messages over a
// restart, as a packaged Mosquitto with persistence does.
func TestBrokerKeepsRetainedAcrossRestart(t *testing.T) {
	b := Start(t, Options{
		Users: map[string]string{"a": "pa", "b": "pb"},
		ACL:   "user a\ntopic readwrite x/#\n\nuser b\ntopic read x/#\n",
	})
	a := Connect(t, b.URL(), "a", "pa", "x/#")
	a.Publish(t, "x/kept", []byte("1"), 1, true, nil)
	a.WaitPayload(t, 5*time.Second, "x/kept", "1")
	bc := Connect(t, b.URL(), "b", "pb")
	bc.Publish(t, "x/denied", []byte("no"), 0, false, nil) // b may not write
	b.Restart(t)
	c := Connect(t, b.URL(), "b", "pb", "x/#")
	if m := c.WaitPayload(t, 5*time.Second, "x/kept", "1"); !m.Retain {
		t.Error("retained message not retained")
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(a.Messages("x/denied")) + len(c.Messages("x/denied")); n != 0 {
		t.Errorf("the ACL let user b write (%d messages)", n)
	}
}

// TestTLSListenerIsSignedByTheCA: the TLS listener's certificate verifies
// against CAFile for localhost, and against nothing else.
func TestTLSListenerIsSignedByTheCA(t *testing.T) {
	b := Start(t, Options{TLS: true})
	pem, err := os.ReadFile(b.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	addr := fmt.Sprintf("127.0.0.1:%d", b.TLSPort)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("TLS with the CA: %v", err)
	}
	c.Close()
	if c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "localhost"}); err == nil {
		c.Close()
		t.Error("the certificate verified against the system roots")
	}
}

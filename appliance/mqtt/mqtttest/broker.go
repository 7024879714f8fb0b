// Package mqtttest runs a real Mosquitto broker for tests, and a small MQTT
// 5 client that watches and publishes the way Home Assistant or an
// automation would.
//
// # Concepts
//
// Start writes a broker config into a temporary directory (a password file
// made with mosquitto_passwd, an ACL, persistence so a restart keeps
// sessions and retained messages, optionally a TLS listener with a CA and
// certificate generated on the spot), starts /usr/sbin/mosquitto on free
// loopback ports and kills it by PID when the test ends. Under CI=true a
// missing mosquitto fails the test instead of skipping it: .ci/deps
// installs it.
package mqtttest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the broker Debian's mosquitto package installs.
const Binary = "/usr/sbin/mosquitto"

// Options describe the broker.
type Options struct {
	// Users maps user names to passwords; none means anonymous access.
	Users map[string]string
	// ACL is the ACL file's text; empty means every user may do anything.
	ACL string
	// TLS adds a TLS listener whose certificate (for localhost and
	// 127.0.0.1) is signed by a CA made for the test (CAFile).
	TLS bool
}

// Broker is a running Mosquitto.
type Broker struct {
	t    testing.TB
	dir  string
	opts Options
	// Port is the plain listener; TLSPort the TLS one (0 without TLS).
	Port, TLSPort int

	mu  sync.Mutex
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Need fails (under CI) or skips the test when mosquitto is missing.
func Need(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Binary); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("mqtttest: %s is missing; .ci/deps installs Debian's mosquitto package", Binary)
	}
	t.Skipf("mqtttest: %s is missing (apt-get install mosquitto)", Binary)
}

// Start runs a broker until the test ends.
func Start(t testing.TB, opts Options) *Broker {
	t.Helper()
	Need(t)
	b := &Broker{t: t, dir: t.TempDir(), opts: opts}
	if opts.TLS {
		writeCerts(t, b.dir)
	}
	// A free port can be taken by another test's process between the probe
	// and mosquitto's bind: then try other ports.
	for attempt := 1; ; attempt++ {
		b.Port, b.TLSPort = freePort(t), 0
		if opts.TLS {
			b.TLSPort = freePort(t)
		}
		b.writeConfig(t)
		err := b.tryStart()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(b.Log(), "Address already in use") {
			t.Fatalf("%v\n%s", err, b.Log())
		}
	}
	t.Cleanup(func() {
		b.kill()
		if t.Failed() {
			t.Logf("mosquitto log:\n%s", b.Log())
		}
	})
	return b
}

// URL is the plain listener's address, mqtt://127.0.0.1:PORT.
func (b *Broker) URL() string { return fmt.Sprintf("mqtt://127.0.0.1:%d", b.Port) }

// TLSURL is the TLS listener's address, mqtts://localhost:PORT.
func (b *Broker) TLSURL() string { return fmt.Sprintf("mqtts://localhost:%d", b.TLSPort) }

// CAFile is the PEM file of the CA that signed the TLS listener's
// certificate.
func (b *Broker) CAFile() string { return filepath.Join(b.dir, "ca.pem") }

// Dir is the broker's directory (config, persistence, log).
func (b *Broker) Dir() string { return b.dir }

// Log returns what the broker logged.
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log == nil {
		return ""
	}
	return b.log.String()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (b *Broker) writeConfig(t testing.TB) {
	t.Helper()
	var conf strings.Builder
	fmt.Fprintf(&conf, "per_listener_settings false\npersistence true\npersistence_location %s/\n", b.dir)
	// Run as root, mosquitto would switch to its own user, which cannot
	// read the test's files.
	conf.WriteString("user root\nlog_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\nlog_type information\n")
	fmt.Fprintf(&conf, "listener %d 127.0.0.1\n", b.Port)
	if b.opts.TLS {
		fmt.Fprintf(&conf, "listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n", b.TLSPort,
			b.CAFile(), filepath.Join(b.dir, "server.pem"), filepath.Join(b.dir, "server.key"))
	}
	if len(b.opts.Users) == 0 {
		conf.WriteString("allow_anonymous true\n")
	} else {
		pw := filepath.Join(b.dir, "passwd")
		if err := os.WriteFile(pw, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for user, pass := range b.opts.Users {
			out, err := exec.Command("mosquitto_passwd", "-b", pw, user, pass).CombinedOutput()
			if err != nil {
				t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
			}
		}
		fmt.Fprintf(&conf, "allow_anonymous false\npassword_file %s\n", pw)
	}
	if b.opts.ACL != "" {
		acl := filepath.Join(b.dir, "acl")
		if err := os.WriteFile(acl, []byte(b.opts.ACL), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "acl_file %s\n", acl)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "mosquitto.conf"), []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (b *Broker) start(t testing.TB) {
	t.Helper()
	if err := b.tryStart(); err != nil {
		t.Fatalf("%v\n%s", err, b.Log())
	}
}

// tryStart runs mosquitto and waits until its listeners accept
// connections.
func (b *Broker) tryStart() error {
	cmd := exec.Command(Binary, "-c", filepath.Join(b.dir, "mosquitto.conf"))
	b.mu.Lock()
	if b.log == nil {
		b.log = &bytes.Buffer{}
	}
	cmd.Stdout, cmd.Stderr = syncWriter{&b.mu, b.log}, syncWriter{&b.mu, b.log}
	b.mu.Unlock()
	// Its own process group, so nothing the test's terminal sends reaches
	// it, and it dies with the test (Pdeathsig).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mqtttest: start mosquitto: %w", err)
	}
	b.mu.Lock()
	b.cmd = cmd
	b.mu.Unlock()
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		// Reaped: kill and waitGone see it gone.
		b.mu.Lock()
		if b.cmd == cmd {
			b.cmd = nil
		}
		b.mu.Unlock()
		exited <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for _, port := range []int{b.Port, b.TLSPort} {
		if port == 0 {
			continue
		}
		for {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			select {
			case err := <-exited:
				return fmt.Errorf("mqtttest: mosquitto exited at start: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				b.kill()
				return fmt.Errorf("mqtttest: mosquitto does not listen on %d after 10 s", port)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// kill ends the broker by its PID (SIGKILL) and waits until it is gone.
func (b *Broker) kill() {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	b.waitGone(cmd)
}

// waitGone waits up to 15 s: a broker saving its persistence file on a
// machine busy with other test packages' fsyncs was seen to take over 5.
func (b *Broker) waitGone(cmd *exec.Cmd) {
	for i := 0; i < 1500; i++ {
		b.mu.Lock()
		gone := b.cmd != cmd
		b.mu.Unlock()
		if gone {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop ends the broker as a service manager does (SIGTERM): it saves its
// persistence file (sessions, retained messages) first.
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	b.waitGone(cmd)
	b.mu.Lock()
	still := b.cmd == cmd
	b.mu.Unlock()
	if still {
		b.kill()
		t.Fatal("mqtttest: mosquitto ignored SIGTERM for 15 s")
	}
}

// Restart stops the broker cleanly and starts it again on the same ports,
// as `systemctl restart mosquitto` does.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Stop(t)
	b.start(t)
}

// StartAgain starts a stopped broker on the same ports.
func (b *Broker) StartAgain(t testing.TB) {
	t.Helper()
	b.start(t)
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// writeCerts makes a CA and a server certificate for localhost/127.0.0.1
// signed by it: ca.pem, server.pem, server.key in dir.
func writeCerts(t testing.TB, dir string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Perch test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: der},
		"server.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Command pkgtestd is the loopback world of the package test
// (image/deb/package-test.sh): a static file server for the apt
// repositories under a directory, as any web server would serve dist/apt,
// and a fake OpenAI-compatible provider (providertest) whose replies say
// how many user messages the request carried, so a test can tell that a
// session's history reached the model.
//
//	pkgtestd -root build/pkgtest/www -env build/pkgtest/servers.env
//
// It writes REPO_URL=… and PROVIDER_URL=… to the -env file once both
// listen, and runs until SIGTERM/SIGINT or -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pkgtestd", flag.ContinueOnError)
	root := fs.String("root", "", "serve this `directory` over HTTP")
	envFile := fs.String("env", "", "write REPO_URL and PROVIDER_URL to this `file`")
	timeout := fs.Duration("timeout", 30*time.Minute, "exit after this long whatever happens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" || *envFile == "" {
		return errors.New("pkgtestd: -root and -env are required")
	}
	if st, err := os.Stat(*root); err != nil || !st.IsDir() {
		return fmt.Errorf("pkgtestd: -root %s is not a directory", *root)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	prov := NewProvider()
	defer prov.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("pkgtestd: %w", err)
	}
	srv := &http.Server{Handler: Files(*root), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	env := fmt.Sprintf("REPO_URL=http://%s\nPROVIDER_URL=%s\n", ln.Addr(), prov.Base())
	if err := os.WriteFile(*envFile+".tmp", []byte(env), 0o644); err != nil {
		return fmt.Errorf("pkgtestd: %w", err)
	}
	if err := os.Rename(*envFile+".tmp", *envFile); err != nil {
		return fmt.Errorf("pkgtestd: %w", err)
	}

	select {
	case <-ctx.Done():
	case err := <-done:
		return fmt.Errorf("pkgtestd: %w", err)
	}
	shut, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	return srv.Shutdown(shut)
}

// Files serves root read-only, as a static web server serves dist/apt:
// plain files, no directory listings.
func Files(root string) http.Handler {
	fsrv := http.FileServer(http.Dir(root))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(path.Clean("/"+r.URL.Path)))); err == nil && st.IsDir() {
			http.NotFound(w, r)
			return
		}
		fsrv.ServeHTTP(w, r)
	})
}

// NewProvider starts the fake provider. Its reply to a chat request is
// "fake reply: N user messages, last: TEXT".
func NewProvider() *providertest.Server {
	p := providertest.New()
	p.Default = func(req providertest.ChatRequest) providertest.Reply {
		n := 0
		for _, m := range req.Messages {
			if m.Role == "user" {
				n++
			}
		}
		return providertest.Reply{Content: fmt.Sprintf("fake reply: %d user messages, last: %s", n, providertest.LastUser(req))}
	}
	return p
}

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A minimal WebDriver client for Debian's chromedriver and chromium: the
// W3C WebDriver HTTP API (new session, navigate, execute script,
// screenshot), enough for a test to look at a page as a person would.

const (
	chromiumPath     = "/usr/bin/chromium"
	chromedriverPath = "/usr/bin/chromedriver"
)

type browser struct {
	t       *testing.T
	base    string // http://127.0.0.1:<port>/session/<id>
	driver  *exec.Cmd
	dataDir string
}

// startBrowser starts chromedriver and a headless Chromium session. A
// missing binary or a session that cannot start fails the test.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	for _, p := range []string{chromiumPath, chromedriverPath} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing (Debian packages chromium and chromium-driver): %v", p, err)
		}
	}
	port := freePort(t)
	cmd := exec.Command(chromedriverPath, fmt.Sprintf("--port=%d", port))
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(root + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not answer on %s: %v\n%s", root, err, logBuf.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b := &browser{t: t, driver: cmd, dataDir: t.TempDir()}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromiumPath, "args": []string{
			"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
			"--user-data-dir=" + b.dataDir, "--window-size=1400,1100",
		}},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(http.MethodPost, root+"/session", caps, &sess); err != nil || sess.SessionID == "" {
		t.Fatalf("chromedriver could not start chromium: %v\n%s", err, logBuf.String())
	}
	b.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { _ = b.call(http.MethodDelete, b.base, nil, nil) })
	return b
}

// call makes one WebDriver request and decodes its "value".
func (b *browser) call(method, url string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("webdriver %s %s: %d %.300s", method, url, resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %d %.500s", method, url, resp.StatusCode, env.Value)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

// open navigates to url and waits for the page to load.
func (b *browser) open(url string) {
	b.t.Helper()
	if err := b.call(http.MethodPost, b.base+"/url", map[string]string{"url": url}, nil); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
}

// eval runs a script in the page (WebDriver runs it whatever the page's
// Content-Security-Policy) and decodes its result into out.
func (b *browser) eval(script string, out any) {
	b.t.Helper()
	if err := b.call(http.MethodPost, b.base+"/execute/sync", map[string]any{"script": script, "args": []any{}}, out); err != nil {
		b.t.Fatalf("script %q: %v", script, err)
	}
}

// screenshot writes a PNG of the window to path.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var data string
	if err := b.call(http.MethodGet, b.base+"/screenshot", nil, &data); err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	png, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

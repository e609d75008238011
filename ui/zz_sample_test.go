package ui

import (
	"net/http"
	"os"
	"testing"
	"time"
)

func TestZZServeSample(t *testing.T) {
	addr := os.Getenv("UI_SAMPLE_ADDR")
	if addr == "" {
		t.Skip()
	}
	s := testSnapshot()
	if os.Getenv("UI_SAMPLE_LOAD") != "" {
		s = loadSnapshot(200, 8)
	}
	srv := &http.Server{Addr: addr, Handler: Handler(fakeSource{snap: s}, Options{Now: func() time.Time { return t0.Add(5 * time.Second) }})}
	go srv.ListenAndServe()
	time.Sleep(40 * time.Second)
}

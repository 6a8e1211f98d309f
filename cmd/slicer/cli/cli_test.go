package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRunWithoutCluster(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	cases := map[string]struct {
		args       []string
		wantCode   int
		wantStdout string // substring ("" = must be empty)
		wantStderr string // substring ("" = must be empty)
	}{
		"no command":                      {args: nil, wantCode: ExitUsage, wantStderr: "Usage:\n  slicer slice-map"},
		"help":                            {args: []string{"help"}, wantCode: ExitOK, wantStdout: "Usage:\n  slicer slice-map"},
		"--help":                          {args: []string{"--help"}, wantCode: ExitOK, wantStdout: "slicer version"},
		"version":                         {args: []string{"version"}, wantCode: ExitOK, wantStdout: "slicer "},
		"unknown command":                 {args: []string{"slice-mop"}, wantCode: ExitUsage, wantStderr: `slicer: unknown command "slice-mop"`},
		"unknown flag":                    {args: []string{"slice-map", "--nodes", "x"}, wantCode: ExitUsage, wantStderr: "flag provided but not defined: -nodes"},
		"bad output format":               {args: []string{"slice-map", "-o", "yaml"}, wantCode: ExitUsage, wantStderr: `-o must be text or json, not "yaml"`},
		"stray argument":                  {args: []string{"slice-map", "n1"}, wantCode: ExitUsage, wantStderr: `unexpected arguments ["n1"]`},
		"slice-map -h":                    {args: []string{"slice-map", "-h"}, wantCode: ExitOK, wantStderr: "-kubeconfig string"},
		"kubeconfig not found":            {args: []string{"slice-map", "--kubeconfig", missing}, wantCode: ExitError, wantStderr: "load kubeconfig"},
		"right-size without --prometheus": {args: []string{"right-size"}, wantCode: ExitUsage, wantStderr: "--prometheus URL is required"},
		"right-size bad window":           {args: []string{"right-size", "--prometheus", "http://127.0.0.1:1", "--window", "0s"}, wantCode: ExitUsage, wantStderr: "--window must be at least 1s"},
		"right-size bad output":           {args: []string{"right-size", "--prometheus", "http://127.0.0.1:1", "-o", "yaml"}, wantCode: ExitUsage, wantStderr: `-o must be text or json, not "yaml"`},
		"right-size unreachable":          {args: []string{"right-size", "--prometheus", "http://127.0.0.1:1", "--timeout", "5s"}, wantCode: ExitError, wantStderr: "slicer right-size: query max_over_time"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			check := func(what, got, want string) {
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s = %q, want it to contain %q", what, got, want)
				}
			}
			check("stdout", stdout.String(), tc.wantStdout)
			check("stderr", stderr.String(), tc.wantStderr)
		})
	}
}

func TestVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "1.2.3"
	var stdout bytes.Buffer
	if code := Run(context.Background(), []string{"version"}, &stdout, &bytes.Buffer{}); code != ExitOK {
		t.Fatalf("exit code %d", code)
	}
	if diff := cmp.Diff("slicer 1.2.3\n", stdout.String()); diff != "" {
		t.Errorf("version (-want +got):\n%s", diff)
	}
}

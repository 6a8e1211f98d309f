package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// Containerfile is what an image built from a Containerfile's final stage
// carries in its config: the engine-less build (images/local.sh) takes these
// from the same file `podman build` reads, so both builds label and run the
// image alike.
type Containerfile struct {
	Labels     map[string]string
	User       string // the final stage's last USER ("" when none)
	Entrypoint []string
	// RootExplained: USER is 0 and the file gives the certification reason
	// (it asks for "Host Level Access: Privileged"), as images/parsetest
	// requires of a root image. Only then may the image run as root.
	RootExplained bool
}

// ReadContainerfile parses path with BuildKit's parser and returns its final
// stage's labels, user and exec-form entrypoint, with ${VAR} expanded from the
// ARG defaults (global, then the stage's), overridden by buildArgs as
// `--build-arg` would.
func ReadContainerfile(path string, buildArgs map[string]string) (Containerfile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Containerfile{}, fmt.Errorf("read containerfile: %w", err)
	}
	res, err := parser.Parse(bytes.NewReader(raw))
	if err != nil {
		return Containerfile{}, fmt.Errorf("parse %s: %w", path, err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return Containerfile{}, fmt.Errorf("instructions of %s: %w", path, err)
	}
	if len(stages) == 0 {
		return Containerfile{}, fmt.Errorf("%s has no stage", path)
	}
	vars := map[string]string{}
	declare := func(args []instructions.ArgCommand) {
		for _, a := range args {
			for _, kv := range a.Args {
				switch v, ok := buildArgs[kv.Key]; {
				case ok:
					vars[kv.Key] = v
				case kv.Value != nil:
					vars[kv.Key] = *kv.Value
				default:
					vars[kv.Key] = ""
				}
			}
		}
	}
	declare(metaArgs)
	lex := shell.NewLex(res.EscapeToken)
	expand := func(s string) (string, error) {
		r, _, err := lex.ProcessWord(s, shell.EnvsFromSlice(envList(vars)))
		return r, err
	}
	out := Containerfile{Labels: map[string]string{}}
	for _, cmd := range stages[len(stages)-1].Commands {
		switch cmd := cmd.(type) {
		case *instructions.ArgCommand:
			declare([]instructions.ArgCommand{*cmd})
		case *instructions.LabelCommand:
			for _, kv := range cmd.Labels {
				k, err := expand(kv.Key)
				if err != nil {
					return Containerfile{}, fmt.Errorf("label %s: %w", kv.Key, err)
				}
				v, err := expand(kv.Value)
				if err != nil {
					return Containerfile{}, fmt.Errorf("label %s: %w", kv.Key, err)
				}
				out.Labels[k] = v
			}
		case *instructions.UserCommand:
			u, err := expand(cmd.User)
			if err != nil {
				return Containerfile{}, fmt.Errorf("USER: %w", err)
			}
			out.User = u
		case *instructions.EntrypointCommand:
			if cmd.PrependShell {
				return Containerfile{}, fmt.Errorf("%s: ENTRYPOINT in shell form %v; want the exec form", path, cmd.CmdLine)
			}
			out.Entrypoint = cmd.CmdLine
		}
	}
	text := string(raw)
	out.RootExplained = out.User == "0" && strings.Contains(text, "Host Level") && strings.Contains(text, "Access: Privileged")
	return out, nil
}

func envList(vars map[string]string) []string {
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// parseKV splits repeated KEY=VALUE flags into a map.
func parseKV(flagName string, kvs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-%s %q: want KEY=VALUE", flagName, kv)
		}
		m[k] = v
	}
	return m, nil
}

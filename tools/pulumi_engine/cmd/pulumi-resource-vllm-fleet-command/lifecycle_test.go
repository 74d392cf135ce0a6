package main

// The lifecycle semantics kept from pulumi-command, on the provider's gRPC methods (no engine): a change of
// `triggers` replaces; a change of a command, its environment, stdin or connection runs `update` (else
// `create`) in place; a change of `delete` alone is recorded without running anything; `delete` runs on
// destroy. Local commands really run (sh), writing to a file the test reads.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func lifecycleProps(t *testing.T, m resource.PropertyMap) *structpb.Struct {
	t.Helper()
	s, err := plugin.MarshalProperties(m, plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func lifecycleInputs(kv map[string]any) resource.PropertyMap {
	return resource.NewPropertyMapFromMap(kv)
}

func TestDiffReplacesOnTriggersUpdatesInPlaceOtherwise(t *testing.T) {
	base := map[string]any{
		"create":      "echo hi",
		"delete":      "echo bye",
		"environment": map[string]any{"A": "1"},
		"triggers":    []any{"v1"},
		"connection":  map[string]any{"host": "10.0.0.1", "port": 22, "user": "root"},
	}
	with := func(key string, v any) map[string]any {
		out := map[string]any{}
		for k, val := range base {
			out[k] = val
		}
		out[key] = v
		return out
	}
	cases := []struct {
		name     string
		news     resource.PropertyMap
		changes  pulumirpc.DiffResponse_DiffChanges
		replaces []string
		diffs    []string
	}{
		{"nothing changed", lifecycleInputs(base), pulumirpc.DiffResponse_DIFF_NONE, nil, nil},
		{"triggers", lifecycleInputs(with("triggers", []any{"v2"})), pulumirpc.DiffResponse_DIFF_SOME,
			[]string{"triggers"}, []string{"triggers"}},
		{"create command", lifecycleInputs(with("create", "echo hello")), pulumirpc.DiffResponse_DIFF_SOME,
			nil, []string{"create"}},
		{"environment", lifecycleInputs(with("environment", map[string]any{"A": "2"})),
			pulumirpc.DiffResponse_DIFF_SOME, nil, []string{"environment"}},
		{"connection (same node, new address)", lifecycleInputs(with("connection",
			map[string]any{"host": "10.0.0.2", "port": 22, "user": "root"})), pulumirpc.DiffResponse_DIFF_SOME,
			nil, []string{"connection"}},
		{"delete command only (recorded)", lifecycleInputs(with("delete", "echo farewell")),
			pulumirpc.DiffResponse_DIFF_SOME, nil, []string{"delete"}},
		{"unknown create (computed at preview)", func() resource.PropertyMap {
			m := lifecycleInputs(base)
			m["create"] = resource.MakeComputed(resource.NewStringProperty(""))
			return m
		}(), pulumirpc.DiffResponse_DIFF_SOME, nil, []string{"create"}},
	}
	p := &commandProvider{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := p.Diff(context.Background(), &pulumirpc.DiffRequest{
				Type: remoteType, Olds: lifecycleProps(t, lifecycleInputs(base)), News: lifecycleProps(t, c.news),
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetChanges() != c.changes {
				t.Errorf("changes = %v, want %v", resp.GetChanges(), c.changes)
			}
			if strings.Join(resp.GetReplaces(), ",") != strings.Join(c.replaces, ",") {
				t.Errorf("replaces = %v, want %v", resp.GetReplaces(), c.replaces)
			}
			if strings.Join(resp.GetDiffs(), ",") != strings.Join(c.diffs, ",") {
				t.Errorf("diffs = %v, want %v", resp.GetDiffs(), c.diffs)
			}
			for _, k := range c.diffs {
				want := pulumirpc.PropertyDiff_UPDATE
				if contains(c.replaces, k) {
					want = pulumirpc.PropertyDiff_UPDATE_REPLACE
				}
				if got := resp.GetDetailedDiff()[k].GetKind(); got != want {
					t.Errorf("detailed diff of %s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestUpdateRunsTheUpdateCommandOrRecordsOnly(t *testing.T) {
	cases := []struct {
		name    string
		olds    map[string]any
		news    map[string]any
		ran     string // what the log file holds afterwards ("" = nothing ran)
		stdout  string
		preview bool
	}{
		{
			name: "create changed, update given: update runs",
			olds: map[string]any{"create": "echo create >> $LOG", "update": "echo update >> $LOG"},
			news: map[string]any{"create": "echo create2 >> $LOG", "update": "echo update >> $LOG; echo out"},
			ran:  "update\n", stdout: "out",
		},
		{
			name: "create changed, no update: create runs again",
			olds: map[string]any{"create": "echo create >> $LOG"},
			news: map[string]any{"create": "echo create2 >> $LOG; echo out2"},
			ran:  "create2\n", stdout: "out2",
		},
		{
			name: "only delete changed: nothing runs, the last outputs are kept",
			olds: map[string]any{"create": "echo create >> $LOG", "delete": "echo d1 >> $LOG", "stdout": "kept"},
			news: map[string]any{"create": "echo create >> $LOG", "delete": "echo d2 >> $LOG"},
			ran:  "", stdout: "kept",
		},
		{
			name: "preview: nothing runs, the outputs are unknown",
			olds: map[string]any{"create": "echo create >> $LOG"},
			news: map[string]any{"create": "echo create2 >> $LOG"},
			ran:  "", preview: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			env := map[string]any{"LOG": log}
			c.olds["environment"], c.news["environment"] = env, env
			resp, err := (&commandProvider{}).Update(context.Background(), &pulumirpc.UpdateRequest{
				Type: localType, Olds: lifecycleProps(t, lifecycleInputs(c.olds)),
				News: lifecycleProps(t, lifecycleInputs(c.news)), Preview: c.preview,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := lifecycleRead(t, log); got != c.ran {
				t.Errorf("commands run: %q, want %q", got, c.ran)
			}
			outs, err := unmarshal(resp.GetProperties())
			if err != nil {
				t.Fatal(err)
			}
			if c.preview {
				if !outs["stdout"].ContainsUnknowns() {
					t.Errorf("preview stdout = %v, want unknown", outs["stdout"])
				}
				return
			}
			if got := strings.TrimSpace(str(outs, "stdout")); got != c.stdout {
				t.Errorf("stdout = %q, want %q", got, c.stdout)
			}
			// The new delete command is recorded by the engine, as the resource's inputs (sent back as
			// old_inputs to Delete): the outputs are stdout and stderr alone.
			if _, echoed := outs["delete"]; echoed || len(outs) > 2 {
				t.Errorf("outputs echo inputs: %v", outs)
			}
		})
	}
}

func TestDeleteRunsTheRecordedDeleteCommand(t *testing.T) {
	cases := []struct {
		name    string
		delete  string
		ran     string
		wantErr string
	}{
		{"delete given", "echo deleted >> $LOG", "deleted\n", ""},
		{"no delete command: nothing runs", "", "", ""},
		{"a failing delete is an error (the resource stays)", "echo partial >> $LOG; exit 3", "partial\n", "exit 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			props := map[string]any{"create": "true", "environment": map[string]any{"LOG": log}}
			if c.delete != "" {
				props["delete"] = c.delete
			}
			_, err := (&commandProvider{}).Delete(context.Background(), &pulumirpc.DeleteRequest{
				Type: localType, Properties: lifecycleProps(t, lifecycleInputs(props)),
			})
			if c.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("error = %v, want one with %q", err, c.wantErr)
			}
			if got := lifecycleRead(t, log); got != c.ran {
				t.Errorf("commands run: %q, want %q", got, c.ran)
			}
		})
	}
}

func TestCreatePreviewRunsNothing(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	props := lifecycleInputs(map[string]any{"create": "echo ran >> $LOG", "environment": map[string]any{"LOG": log}})
	resp, err := (&commandProvider{}).Create(context.Background(), &pulumirpc.CreateRequest{
		Type: localType, Properties: lifecycleProps(t, props), Preview: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "" || lifecycleRead(t, log) != "" {
		t.Errorf("preview created %q and ran %q", resp.GetId(), lifecycleRead(t, log))
	}
	resp, err = (&commandProvider{}).Create(context.Background(), &pulumirpc.CreateRequest{
		Type: localType, Properties: lifecycleProps(t, props),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() == "" || lifecycleRead(t, log) != "ran\n" {
		t.Errorf("create gave id %q and ran %q", resp.GetId(), lifecycleRead(t, log))
	}
}

func lifecycleRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestCommandPackageLifecycle: the same semantics under pulumi-command's types and inputs, as the
// pulumi_command SDK sends them: create runs once; an environment change updates in place (the last
// run's output in PULUMI_COMMAND_STDOUT); a triggers change replaces; delete runs on destroy;
// interpreter and dir are honoured; assetPaths is refused.
func TestCommandPackageLifecycle(t *testing.T) {
	const typ = "command:local:Command"
	p := &commandProvider{pkg: upstreamPkg}
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	inputs := func(version string, triggers ...any) map[string]any {
		return map[string]any{
			"create":      `echo "create $V $(pwd)" >> $LOG; echo out-$V`,
			"update":      `echo "update $V prev=${PULUMI_COMMAND_STDOUT-}" >> $LOG; echo out-$V`,
			"delete":      `echo "delete prev=${PULUMI_COMMAND_STDOUT-}" >> $LOG`,
			"environment": map[string]any{"LOG": log, "V": version},
			"interpreter": []any{"/bin/sh", "-eu", "-c"},
			"dir":         dir,
			"triggers":    append([]any{}, triggers...),
		}
	}
	v1 := lifecycleInputs(inputs("1", "t1"))
	check, err := p.Check(ctx, &pulumirpc.CheckRequest{Type: typ, News: lifecycleProps(t, v1)})
	if err != nil || len(check.GetFailures()) != 0 {
		t.Fatalf("check: %v %v", check.GetFailures(), err)
	}
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Type: typ, Properties: lifecycleProps(t, v1)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lifecycleRead(t, log), "create 1 "+dir+"\n"; got != want {
		t.Fatalf("create ran %q, want %q", got, want)
	}

	v2 := lifecycleInputs(inputs("2", "t1"))
	diff, err := p.Diff(ctx, &pulumirpc.DiffRequest{Type: typ, OldInputs: lifecycleProps(t, v1),
		Olds: created.GetProperties(), News: lifecycleProps(t, v2)})
	if err != nil {
		t.Fatal(err)
	}
	if diff.GetChanges() != pulumirpc.DiffResponse_DIFF_SOME || len(diff.GetReplaces()) != 0 ||
		strings.Join(diff.GetDiffs(), ",") != "environment" {
		t.Fatalf("environment change: %v", diff)
	}
	updated, err := p.Update(ctx, &pulumirpc.UpdateRequest{Type: typ, OldInputs: lifecycleProps(t, v1),
		Olds: created.GetProperties(), News: lifecycleProps(t, v2)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lifecycleRead(t, log), "create 1 "+dir+"\nupdate 2 prev=out-1\n"; got != want {
		t.Fatalf("update ran %q, want %q", got, want)
	}

	v3 := lifecycleInputs(inputs("2", "t2"))
	diff, err = p.Diff(ctx, &pulumirpc.DiffRequest{Type: typ, OldInputs: lifecycleProps(t, v2),
		Olds: updated.GetProperties(), News: lifecycleProps(t, v3)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(diff.GetReplaces(), ",") != "triggers" ||
		diff.GetDetailedDiff()["triggers"].GetKind() != pulumirpc.PropertyDiff_UPDATE_REPLACE {
		t.Fatalf("triggers change: %v", diff)
	}

	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Type: typ, OldInputs: lifecycleProps(t, v2),
		Properties: updated.GetProperties()}); err != nil {
		t.Fatal(err)
	}
	if got := lifecycleRead(t, log); !strings.HasSuffix(got, "update 2 prev=out-1\ndelete prev=out-2\n") {
		t.Fatalf("delete ran %q", got)
	}

	// addPreviousOutputInEnv: false keeps the last output out of the environment.
	off := inputs("3")
	off["addPreviousOutputInEnv"] = false
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Type: typ, OldInputs: lifecycleProps(t, v2),
		Olds: updated.GetProperties(), News: lifecycleProps(t, lifecycleInputs(off))}); err != nil {
		t.Fatal(err)
	}
	if got := lifecycleRead(t, log); !strings.HasSuffix(got, "update 3 prev=\n") {
		t.Fatalf("addPreviousOutputInEnv=false: %q", got)
	}

	assets := inputs("1")
	assets["assetPaths"] = []any{"*.txt"}
	check, err = p.Check(ctx, &pulumirpc.CheckRequest{Type: typ, News: lifecycleProps(t, lifecycleInputs(assets))})
	if err != nil || len(check.GetFailures()) != 1 || check.GetFailures()[0].GetProperty() != "assetPaths" {
		t.Fatalf("assetPaths: %v %v", check.GetFailures(), err)
	}
}

// TestServesTheCommandPackage: run as pulumi-resource-command, the binary is pulumi-command at the
// SDK's pinned version, with the SDK's property names in its schema.
func TestServesTheCommandPackage(t *testing.T) {
	if got := servedPackage("/home/x/.pulumi/plugins/resource-command-v1.2.1/pulumi-resource-command"); got != upstreamPkg {
		t.Fatalf("servedPackage(pulumi-resource-command) = %v", got)
	}
	if got := servedPackage("pulumi-resource-vllm-fleet-command"); got != legacyPkg {
		t.Fatalf("servedPackage(pulumi-resource-vllm-fleet-command) = %v", got)
	}
	p := &commandProvider{pkg: upstreamPkg}
	info, _ := p.GetPluginInfo(context.Background(), nil)
	if info.GetVersion() != "1.2.1" {
		t.Fatalf("version %q", info.GetVersion())
	}
	resp, err := p.GetSchema(context.Background(), &pulumirpc.GetSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Name      string
		Version   string
		Resources map[string]struct {
			InputProperties map[string]struct{ ReplaceOnChanges bool }
			Properties      map[string]any
			RequiredInputs  []string
		}
		Types map[string]struct{ Properties map[string]any }
	}
	if err := json.Unmarshal([]byte(resp.GetSchema()), &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Name != "command" || schema.Version != "1.2.1" {
		t.Fatalf("schema %s %s", schema.Name, schema.Version)
	}
	shared := "addPreviousOutputInEnv create delete environment logging stdin triggers update"
	want := map[string]string{
		"command:local:Command":  "addPreviousOutputInEnv archivePaths assetPaths create delete dir environment interpreter logging stdin triggers update",
		"command:remote:Command": "addPreviousOutputInEnv connection create delete environment logging stdin triggers update",
	}
	for typ, names := range want {
		r := schema.Resources[typ]
		if got := strings.Join(sortedKeys(keysOf(r.InputProperties)), " "); got != names {
			t.Errorf("%s inputs %q, want %q (%s shared)", typ, got, names, shared)
		}
		if !r.InputProperties["triggers"].ReplaceOnChanges || r.Properties["stdout"] == nil {
			t.Errorf("%s: triggers replace, stdout is an output: %v", typ, r)
		}
	}
	conn := strings.Join(sortedKeys(keysOf(schema.Types["command:remote:Connection"].Properties)), " ")
	if conn != "agentSocketPath dialErrorLimit host hostKey password perDialTimeout port privateKey privateKeyPassword proxy user" {
		t.Errorf("connection fields %q", conn)
	}
}

func keysOf[V any](m map[string]V) map[string]string {
	out := map[string]string{}
	for k := range m {
		out[k] = ""
	}
	return out
}

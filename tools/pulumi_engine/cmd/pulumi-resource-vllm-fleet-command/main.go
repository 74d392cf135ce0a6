// pulumi-resource-vllm-fleet-command: local and SSH commands as Pulumi resources.
//
// It plays the part of pulumi-command's `local.Command` and `remote.Command`, whose provider module
// (github.com/pulumi/pulumi-command/provider) the Go module proxy refuses at every version. Built from
// this source by tools/build_pulumi_engine.sh against the Pulumi Go SDK; the Python side is
// vllm_fleet/pulumi/commands.py. A Go plugin starts in milliseconds, where a Python dynamic provider
// costs a fresh interpreter on every `pulumi up` and pickles its code into the state.
//
// Resource types and their inputs:
//
//	vllm-fleet-command:local:Command   create, update, delete, environment, stdin, triggers
//	vllm-fleet-command:remote:Command  the same plus connection {host, port, user, private_key,
//	                                   host_key, known_hosts_file}
//
// Semantics kept from pulumi-command: a change of `triggers` replaces the resource; a change of any
// other input runs `update` (or `create` when there is no `update`) in place; `delete` runs when the
// resource is destroyed. Outputs are the inputs plus the tails of stdout and stderr. Secrets reach the
// command through its environment or stdin, never argv; SSH keeps host-key checking on.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

const (
	// The plugin's own version: `pulumi plugin install resource vllm-fleet-command <this> --file <binary>`.
	providerVersion = "0.1.0"
	pkgName         = "vllm-fleet-command"
	localType       = pkgName + ":local:Command"
	remoteType      = pkgName + ":remote:Command"
	// Characters of stdout/stderr kept in state.
	outputTail = 8000
)

var (
	// A change of these replaces the resource.
	replaceOn = []string{"triggers"}
	// A change of these runs the update command in place.
	rerunOn = []string{"create", "update", "environment", "connection", "stdin"}
	// Changes of these are recorded without running anything.
	recordOn = []string{"delete"}
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-version" {
		fmt.Println(providerVersion)
		return
	}
	err := provider.Main(pkgName, func(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return &commandProvider{}, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", pkgName, err)
		os.Exit(1)
	}
}

type commandProvider struct {
	pulumirpc.UnimplementedResourceProviderServer
}

func (p *commandProvider) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: providerVersion}, nil
}

func (p *commandProvider) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: "{}"}, nil
}

func (p *commandProvider) CheckConfig(
	_ context.Context, req *pulumirpc.CheckRequest,
) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (p *commandProvider) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

func (p *commandProvider) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true}, nil
}

func (p *commandProvider) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	if err := checkType(req.GetType(), req.GetUrn()); err != nil {
		return nil, err
	}
	news, err := unmarshal(req.GetNews())
	if err != nil {
		return nil, err
	}
	var failures []*pulumirpc.CheckFailure
	if v, ok := news["create"]; !ok || v.IsNull() {
		failures = append(failures, &pulumirpc.CheckFailure{Property: "create", Reason: "a create command is required"})
	}
	if isRemote(req.GetType(), req.GetUrn()) {
		if v, ok := news["connection"]; !ok || v.IsNull() {
			failures = append(failures, &pulumirpc.CheckFailure{
				Property: "connection", Reason: "a remote command needs a connection {host, port, user, ...}",
			})
		}
	}
	return &pulumirpc.CheckResponse{Inputs: req.GetNews(), Failures: failures}, nil
}

func (p *commandProvider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, news, err := unmarshalPair(req.GetOlds(), req.GetNews())
	if err != nil {
		return nil, err
	}
	replaces := changedKeys(olds, news, replaceOn)
	diffs := append(append(append([]string{}, replaces...), changedKeys(olds, news, rerunOn)...),
		changedKeys(olds, news, recordOn)...)
	detailed := map[string]*pulumirpc.PropertyDiff{}
	for _, k := range diffs {
		kind := pulumirpc.PropertyDiff_UPDATE
		if contains(replaces, k) {
			kind = pulumirpc.PropertyDiff_UPDATE_REPLACE
		}
		detailed[k] = &pulumirpc.PropertyDiff{Kind: kind, InputDiff: true}
	}
	changes := pulumirpc.DiffResponse_DIFF_NONE
	if len(diffs) > 0 {
		changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return &pulumirpc.DiffResponse{
		Changes: changes, Replaces: replaces, Diffs: diffs, DetailedDiff: detailed, HasDetailedDiff: true,
	}, nil
}

func (p *commandProvider) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	news, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	if req.GetPreview() {
		id = ""
	}
	outs, err := p.run(ctx, req.GetType(), req.GetUrn(), news, "create", req.GetPreview())
	if err != nil {
		return nil, err
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: props}, nil
}

func (p *commandProvider) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	olds, news, err := unmarshalPair(req.GetOlds(), req.GetNews())
	if err != nil {
		return nil, err
	}
	var outs resource.PropertyMap
	if len(changedKeys(olds, news, rerunOn)) == 0 {
		// Only recorded inputs (delete) changed: keep the last outputs, run nothing.
		outs = news.Copy()
		for _, k := range []resource.PropertyKey{"stdout", "stderr"} {
			outs[k] = olds[k]
		}
	} else if outs, err = p.run(ctx, req.GetType(), req.GetUrn(), news, "update", req.GetPreview()); err != nil {
		return nil, err
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: props}, nil
}

func (p *commandProvider) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	olds, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	if _, err := p.run(ctx, req.GetType(), req.GetUrn(), olds, "delete", false); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (p *commandProvider) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	// A command has no remote state to read back: refresh keeps what the last run recorded.
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
}

// run executes the `which` command (update falls back to create) and returns the outputs to store.
func (p *commandProvider) run(
	ctx context.Context, typ, urn string, props resource.PropertyMap, which string, preview bool,
) (resource.PropertyMap, error) {
	outs := props.Copy()
	if preview {
		outs["stdout"] = resource.MakeComputed(resource.NewStringProperty(""))
		outs["stderr"] = resource.MakeComputed(resource.NewStringProperty(""))
		return outs, nil
	}
	command := str(props, which)
	if command == "" && which == "update" {
		command = str(props, "create")
	}
	var stdout, stderr string
	if command != "" {
		env := stringMap(props["environment"])
		var err error
		if isRemote(typ, urn) {
			stdout, stderr, err = runRemote(ctx, props["connection"], command, env)
		} else {
			stdout, stderr, err = runLocal(ctx, command, env, str(props, "stdin"))
		}
		if err != nil {
			return nil, err
		}
	}
	outs["stdout"] = resource.NewStringProperty(stdout)
	outs["stderr"] = resource.NewStringProperty(stderr)
	return outs, nil
}

func runLocal(ctx context.Context, command string, env map[string]string, stdin string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = os.Environ()
	for _, k := range sortedKeys(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return output(cmd, "")
}

// runRemote runs script with `sh -s` over SSH: the environment is exported on stdin (not argv), the
// private key sits in a 0600 file in a private temp dir, and the host key is pinned.
func runRemote(
	ctx context.Context, connection resource.PropertyValue, script string, env map[string]string,
) (string, string, error) {
	conn := stringMap(connection)
	host, user := conn["host"], conn["user"]
	if host == "" {
		return "", "", fmt.Errorf("connection.host is empty")
	}
	if user == "" {
		user = "root"
	}
	port := 22
	if s := conn["port"]; s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "", "", fmt.Errorf("connection.port %q is not a number", s)
		}
		port = int(n)
	}
	tmp, err := os.MkdirTemp("", "vllm-fleet-ssh-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)

	var identity []string
	if key := conn["private_key"]; key != "" {
		if !strings.HasSuffix(key, "\n") {
			key += "\n"
		}
		path := filepath.Join(tmp, "id")
		if err := os.WriteFile(path, []byte(key), 0o600); err != nil {
			return "", "", err
		}
		identity = []string{"-i", path}
	}
	known := conn["known_hosts_file"]
	if hostKey := conn["host_key"]; hostKey != "" {
		name := host
		if port != 22 {
			name = fmt.Sprintf("[%s]:%d", host, port)
		}
		known = filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(known, []byte(name+" "+hostKey+"\n"), 0o600); err != nil {
			return "", "", err
		}
	} else if known == "" {
		home, _ := os.UserHomeDir()
		known = filepath.Join(home, ".ssh", "known_hosts")
	}
	var exports strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&exports, "export %s=%s\n", k, shQuote(env[k]))
	}
	args := append(identity,
		"-p", strconv.Itoa(port),
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile="+known,
		"-o", "ConnectTimeout=10",
		user+"@"+host,
		"sh -s",
	)
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Stdin = strings.NewReader(exports.String() + script)
	return output(cmd, fmt.Sprintf("ssh %s@%s:%d: ", user, host, port))
}

func output(cmd *exec.Cmd, prefix string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out, errText := tail(stdout.String()), tail(stderr.String())
	if err != nil {
		code := -1
		if exitErr, ok := err.(*exec.ExitError); ok {
			code = exitErr.ExitCode()
		} else {
			return out, errText, fmt.Errorf("%s%w", prefix, err)
		}
		detail := errText
		if detail == "" {
			detail = out
		}
		return out, errText, fmt.Errorf("%sexit %d: %s", prefix, code, detail)
	}
	return out, errText, nil
}

func checkType(typ, urn string) error {
	t := typ
	if t == "" {
		t = string(resource.URN(urn).Type())
	}
	if t != localType && t != remoteType {
		return fmt.Errorf("unknown resource type %q (this provider has %s and %s)", t, localType, remoteType)
	}
	return nil
}

func isRemote(typ, urn string) bool {
	if typ == "" {
		typ = string(resource.URN(urn).Type())
	}
	return typ == remoteType
}

func unmarshal(s *structpb.Struct) (resource.PropertyMap, error) {
	return plugin.UnmarshalProperties(s, plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true})
}

func unmarshalPair(olds, news *structpb.Struct) (resource.PropertyMap, resource.PropertyMap, error) {
	o, err := unmarshal(olds)
	if err != nil {
		return nil, nil, err
	}
	n, err := unmarshal(news)
	return o, n, err
}

func marshal(m resource.PropertyMap) (*structpb.Struct, error) {
	return plugin.MarshalProperties(m, plugin.MarshalOptions{KeepUnknowns: true, SkipNulls: true})
}

// changedKeys lists the keys whose values differ (an unknown new value counts as a change).
func changedKeys(olds, news resource.PropertyMap, keys []string) []string {
	var out []string
	for _, k := range keys {
		o, n := olds[resource.PropertyKey(k)], news[resource.PropertyKey(k)]
		if n.ContainsUnknowns() || !o.DeepEquals(n) {
			out = append(out, k)
		}
	}
	return out
}

func str(m resource.PropertyMap, key string) string {
	v, ok := m[resource.PropertyKey(key)]
	if !ok || !v.IsString() {
		return ""
	}
	return v.StringValue()
}

// stringMap flattens an object of scalars into strings (numbers without a trailing ".0").
func stringMap(v resource.PropertyValue) map[string]string {
	out := map[string]string{}
	if !v.IsObject() {
		return out
	}
	for k, item := range v.ObjectValue() {
		switch {
		case item.IsString():
			out[string(k)] = item.StringValue()
		case item.IsNumber():
			out[string(k)] = strconv.FormatFloat(item.NumberValue(), 'f', -1, 64)
		case item.IsBool():
			out[string(k)] = strconv.FormatBool(item.BoolValue())
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func tail(s string) string {
	if len(s) > outputTail {
		return s[len(s)-outputTail:]
	}
	return s
}

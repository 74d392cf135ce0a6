// pulumi-resource-vllm-fleet-command: local and SSH commands as Pulumi resources.
//
// It plays the part of pulumi-command's `local.Command` and `remote.Command`, whose provider module
// (github.com/pulumi/pulumi-command/provider) the Go module proxy refuses at every version. Built from
// this source by tools/build_pulumi_engine.sh against the Pulumi Go SDK; the Python side is
// vllm_fleet/pulumi/commands.py. A Go plugin starts in milliseconds, where a Python dynamic provider
// costs a fresh interpreter on every `pulumi up` and pickles its code into the state.
//
// Run as `pulumi-resource-command` (tools/build_pulumi_engine.sh installs it so), the binary serves
// pulumi-command's package instead: `command:local:Command` and `command:remote:Command` with the
// pulumi_command SDK's inputs (camelCase: addPreviousOutputInEnv, interpreter, dir, logging; the
// connection's hostKey, privateKey, agentSocketPath) and schema (schema.go), at the SDK's version, so
// that SDK is the Python front end and upstream's provider can replace this one with no change to the
// program. Stricter than upstream: a remote connection must pin hostKey; password, proxy, assetPaths
// and archivePaths are refused. Outputs are stdout and stderr (without the last newline, as upstream).
//
// Resource types and their inputs (vllm-fleet-command):
//
//	vllm-fleet-command:local:Command   create, update, delete, environment, secret_environment, stdin,
//	                                   triggers
//	vllm-fleet-command:remote:Command  the same plus connection {host, port, user, private_key,
//	                                   host_key, known_hosts_file}
//
// Secrets held once per stack: the provider's own configuration (an explicit provider resource, its
// inputs encrypted once in state) may carry secrets, e.g. sshPrivateKey and apiKey. A command names
// the ones it needs in `secret_environment` ({"ENV_NAME": "configKey"}: names only, no secret in the
// command's inputs), and a remote command whose connection has no private_key uses the provider's
// sshPrivateKey. So a fleet of N nodes keeps its keys in state once, not in N command inputs and
// outputs (the engine re-encrypts every secret of the snapshot at each checkpoint: O(steps x secrets)).
//
// Semantics kept from pulumi-command: a change of `triggers` replaces the resource; a change of any
// other input runs `update` (or `create` when there is no `update`) in place; `delete` runs when the
// resource is destroyed. Outputs are the tails of stdout and stderr only: the engine keeps the inputs
// beside them and sends them back (old_inputs) to Diff, Update and Delete, so echoing them into the
// outputs would only store every input twice and serialise it twice at each of the engine's per-step
// checkpoints (an old state whose outputs still echo the inputs reads the same). Secrets reach the
// command through its environment or stdin, never argv; SSH pins the host key (strict
// checking, no fallback) and offers the private key from an in-process agent, never a file.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
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
	// pulumi-command's package, served when the binary runs as `pulumi-resource-command`, at the version of
	// the pulumi_command SDK pinned in pyproject.toml (the SDK asks the engine for exactly this version).
	commandPkg     = "command"
	commandVersion = "1.2.1"
	// Characters of stdout/stderr kept in state.
	outputTail = 8000
)

// pkgSpec is the package a binary serves: its name (the engine's `pulumi-resource-<name>`) and version.
type pkgSpec struct{ name, version string }

var (
	legacyPkg   = pkgSpec{pkgName, providerVersion}
	upstreamPkg = pkgSpec{commandPkg, commandVersion}
)

// servedPackage: the package the binary serves, by the name it runs under.
func servedPackage(argv0 string) pkgSpec {
	if filepath.Base(argv0) == "pulumi-resource-"+commandPkg {
		return upstreamPkg
	}
	return legacyPkg
}

var (
	// A change of these replaces the resource.
	replaceOn = []string{"triggers"}
	// A change of these runs the update command in place.
	rerunOn = []string{
		"create", "update", "environment", "secret_environment", "connection", "stdin", "interpreter", "dir",
	}
	// Changes of these are recorded without running anything.
	recordOn = []string{"delete", "logging", "addPreviousOutputInEnv"}
	// pulumi-command inputs this provider does not implement: refused by Check, never silently ignored.
	unsupportedInputs = []string{"assetPaths", "archivePaths"}
	// The provider's configuration key of the SSH private key a connection without one uses.
	providerKeyConfig = "sshPrivateKey"
	envName           = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func main() {
	pkg := servedPackage(os.Args[0])
	if len(os.Args) > 1 && os.Args[1] == "-version" {
		fmt.Println(pkg.version)
		return
	}
	err := provider.Main(pkg.name, func(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return &commandProvider{pkg: pkg}, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", pkg.name, err)
		os.Exit(1)
	}
}

type commandProvider struct {
	pulumirpc.UnimplementedResourceProviderServer
	// The package served (zero: vllm-fleet-command).
	pkg pkgSpec
	// The provider's configuration (secrets unwrapped), set by Configure before any resource call.
	config map[string]string
}

func (p *commandProvider) spec() pkgSpec {
	if p.pkg.name == "" {
		return legacyPkg
	}
	return p.pkg
}

func (p *commandProvider) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: p.spec().version}, nil
}

func (p *commandProvider) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	if p.spec() == upstreamPkg {
		return &pulumirpc.GetSchemaResponse{Schema: commandSchema()}, nil
	}
	return &pulumirpc.GetSchemaResponse{Schema: "{}"}, nil
}

func (p *commandProvider) CheckConfig(
	_ context.Context, req *pulumirpc.CheckRequest,
) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

// DiffConfig never asks for a replacement: a replaced provider would replace every command, and a
// replaced converge runs its delete (the removal playbook) on a live node. A changed configuration (a
// rotated key) updates the provider in place; the commands it serves are untouched.
func (p *commandProvider) DiffConfig(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, news, err := unmarshalPair(req.GetOldInputs(), req.GetNews())
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, k := range sortedKeys(boolKeys(configKeys(olds, news))) {
		if k == "version" {
			continue
		}
		if o, n := olds[resource.PropertyKey(k)], news[resource.PropertyKey(k)]; n.ContainsUnknowns() || !o.DeepEquals(n) {
			diffs = append(diffs, k)
		}
	}
	changes := pulumirpc.DiffResponse_DIFF_NONE
	if len(diffs) > 0 {
		changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return &pulumirpc.DiffResponse{Changes: changes, Diffs: diffs}, nil
}

func configKeys(maps ...resource.PropertyMap) map[string]bool {
	keys := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			keys[string(k)] = true
		}
	}
	return keys
}

// Configure keeps the provider's configuration (secrets included) in memory for the commands that
// name it; an SSH key that does not parse is refused here, before any command runs.
func (p *commandProvider) Configure(
	_ context.Context, req *pulumirpc.ConfigureRequest,
) (*pulumirpc.ConfigureResponse, error) {
	config := map[string]string{}
	if req.GetArgs() != nil {
		args, err := unmarshal(req.GetArgs())
		if err != nil {
			return nil, err
		}
		for k, v := range args {
			if s, ok := scalarString(plain(v)); ok && k != "version" {
				config[string(k)] = s
			}
		}
	} else {
		prefix := p.spec().name + ":config:"
		for k, v := range req.GetVariables() {
			if name, ok := strings.CutPrefix(k, prefix); ok && name != "version" {
				config[name] = v
			}
		}
	}
	if key := config[providerKeyConfig]; key != "" {
		if _, err := ssh.ParseRawPrivateKey([]byte(key)); err != nil {
			// The parser's errors never quote the key.
			return nil, fmt.Errorf("provider config %s: %v (an unencrypted OpenSSH or PEM private key)",
				providerKeyConfig, err)
		}
	}
	p.config = config
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
	for _, err := range validateSecretEnvironment(news["secret_environment"]) {
		failures = append(failures, &pulumirpc.CheckFailure{Property: "secret_environment", Reason: err.Error()})
	}
	for _, k := range unsupportedInputs {
		if v, ok := news[resource.PropertyKey(k)]; ok && !v.IsNull() {
			failures = append(failures, &pulumirpc.CheckFailure{
				Property: k, Reason: k + " is not supported by this provider (vllm-fleet's build of the command provider)",
			})
		}
	}
	if v, ok := news["interpreter"]; ok && !v.IsNull() && !v.ContainsUnknowns() {
		if _, err := interpreter(news); err != nil {
			failures = append(failures, &pulumirpc.CheckFailure{Property: "interpreter", Reason: err.Error()})
		}
	}
	if isRemote(req.GetType(), req.GetUrn()) {
		if v, ok := news["connection"]; !ok || v.IsNull() {
			failures = append(failures, &pulumirpc.CheckFailure{
				Property: "connection", Reason: "a remote command needs a connection {host, port, user, ...}",
			})
		} else {
			// Known values are checked now, so `pulumi preview` reports them; unknown ones at run time.
			for _, err := range validateConnection(connectionFields(v)) {
				failures = append(failures, &pulumirpc.CheckFailure{Property: "connection", Reason: err.Error()})
			}
		}
	}
	return &pulumirpc.CheckResponse{Inputs: req.GetNews(), Failures: failures}, nil
}

func (p *commandProvider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, news, err := unmarshalPair(oldInputs(req.GetOldInputs(), req.GetOlds()), req.GetNews())
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
	outs, err := p.run(ctx, req.GetType(), req.GetUrn(), news, nil, "create", req.GetPreview())
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
	olds, news, err := unmarshalPair(oldInputs(req.GetOldInputs(), req.GetOlds()), req.GetNews())
	if err != nil {
		return nil, err
	}
	last, err := unmarshal(req.GetOlds())
	if err != nil {
		return nil, err
	}
	var outs resource.PropertyMap
	if len(changedKeys(olds, news, rerunOn)) == 0 {
		// Only recorded inputs (delete, logging) changed: keep the last outputs, run nothing.
		outs = resource.PropertyMap{"stdout": last["stdout"], "stderr": last["stderr"]}
	} else if outs, err = p.run(ctx, req.GetType(), req.GetUrn(), news, last, "update", req.GetPreview()); err != nil {
		return nil, err
	}
	props, err := marshal(outs)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: props}, nil
}

func (p *commandProvider) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	olds, err := unmarshal(oldInputs(req.GetOldInputs(), req.GetProperties()))
	if err != nil {
		return nil, err
	}
	last, err := unmarshal(req.GetProperties())
	if err != nil {
		return nil, err
	}
	if _, err := p.run(ctx, req.GetType(), req.GetUrn(), olds, last, "delete", false); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (p *commandProvider) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	// A command has no remote state to read back: refresh keeps what the last run recorded.
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
}

// run executes the `which` command (update falls back to create) and returns the outputs to store.
// previous holds the last run's outputs (update, delete): its stdout and stderr are the command's
// PULUMI_COMMAND_STDOUT and PULUMI_COMMAND_STDERR unless addPreviousOutputInEnv is false (pulumi-command's
// default: true).
func (p *commandProvider) run(
	ctx context.Context, typ, urn string, props, previous resource.PropertyMap, which string, preview bool,
) (resource.PropertyMap, error) {
	outs := resource.PropertyMap{}
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
		if add := plain(props["addPreviousOutputInEnv"]); previous != nil && !(add.IsBool() && !add.BoolValue()) {
			env["PULUMI_COMMAND_STDOUT"] = str(previous, "stdout")
			env["PULUMI_COMMAND_STDERR"] = str(previous, "stderr")
		}
		// Names only in the inputs; the values come from the provider's configuration, if it has them.
		for name, key := range stringMap(props["secret_environment"]) {
			if value, ok := p.config[key]; ok && value != "" {
				env[name] = value
			}
		}
		var err error
		if isRemote(typ, urn) {
			stdout, stderr, err = runRemote(ctx, props["connection"], command, env, p.config[providerKeyConfig])
		} else {
			var argv []string
			if argv, err = interpreter(props); err != nil {
				return nil, err
			}
			stdout, stderr, err = runLocal(ctx, append(argv, command), env, str(props, "stdin"), str(props, "dir"))
		}
		if err != nil {
			return nil, err
		}
	}
	if strings.HasPrefix(typeOf(typ, urn), commandPkg+":") {
		// pulumi-command keeps the output without its last newline.
		stdout, stderr = strings.TrimSuffix(stdout, "\n"), strings.TrimSuffix(stderr, "\n")
	}
	outs["stdout"] = resource.NewStringProperty(stdout)
	outs["stderr"] = resource.NewStringProperty(stderr)
	return outs, nil
}

// runLocal runs argv (the interpreter, then the command) in dir (empty: the provider's own directory).
func runLocal(ctx context.Context, argv []string, env map[string]string, stdin, dir string) (string, string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
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
// private key never touches disk (an in-process SSH agent serves it on a socket in a private 0700
// dir), and the host key is pinned with strict checking and no fallback to other known_hosts files.
// A connection without a private_key uses providerKey (the provider's sshPrivateKey), if any.
func runRemote(
	ctx context.Context, connection resource.PropertyValue, script string, env map[string]string, providerKey string,
) (string, string, error) {
	conn, unknown := connectionFields(connection)
	if names := sortedKeys(boolKeys(unknown)); len(names) > 0 {
		return "", "", fmt.Errorf("connection.%s is not known yet", names[0])
	}
	if conn["private_key"] == "" && providerKey != "" {
		conn["private_key"] = providerKey
	}
	t, err := newSSHTarget(conn)
	if err != nil {
		return "", "", err
	}
	tmp, err := os.MkdirTemp(socketBase(), "vllm-fleet-ssh-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o700); err != nil {
		return "", "", err
	}

	known := t.knownHostsFile
	if t.hostKey != "" {
		// Public data only: the pinned line for host (port 22) or [host]:port.
		known = filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(known, []byte(knownHostsName(t.host, t.port)+" "+t.hostKey+"\n"), 0o600); err != nil {
			return "", "", err
		}
	}
	cmdEnv := os.Environ()
	agentSock := t.agentSocket // the caller's agent (agentSocketPath), unless a private key is given
	if t.privateKey != nil {
		agentSock = filepath.Join(tmp, "agent.sock")
		stop, err := serveKey(agentSock, t.privateKey)
		if err != nil {
			return "", "", err
		}
		defer stop()
		cmdEnv = append(withoutEnv(cmdEnv, "SSH_AUTH_SOCK"), "SSH_AUTH_SOCK="+agentSock)
	}
	var exports strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&exports, "export %s=%s\n", k, shQuote(env[k]))
	}
	cmd := exec.CommandContext(ctx, "ssh", sshArgs(t, known, agentSock, knownHostsCommandSupported())...)
	cmd.Env = cmdEnv
	cmd.Stdin = strings.NewReader(exports.String() + script)
	return output(cmd, fmt.Sprintf("ssh %s@%s:%d: ", t.user, t.host, t.port))
}

// sshTarget is a validated connection.
type sshTarget struct {
	host, user     string
	port           int
	privateKey     any // parsed; nil: ssh's own keys / agent
	hostKey        string
	knownHostsFile string
	agentSocket    string // pulumi-command's agentSocketPath
	connectTimeout int    // seconds; pulumi-command's perDialTimeout
}

var (
	posixUser    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	dnsLabel     = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	hostKeyTypes = map[string]bool{
		"ssh-ed25519": true, "ecdsa-sha2-nistp256": true, "ecdsa-sha2-nistp384": true,
		"ecdsa-sha2-nistp521": true, "ssh-rsa": true, "sk-ssh-ed25519@openssh.com": true,
	}
	errHostKeyRequired = errors.New(
		"connection.host_key is required (hostKey in pulumi-command's SDK): pin the host's public key (ssh-keyscan -t ed25519 <host>, the key part)")
)

func newSSHTarget(conn map[string]string) (sshTarget, error) {
	if errs := validateConnection(conn, nil); len(errs) > 0 {
		return sshTarget{}, errors.Join(errs...)
	}
	t := sshTarget{
		host: conn["host"], user: conn["user"], port: 22,
		hostKey: conn["host_key"], knownHostsFile: conn["known_hosts_file"],
		agentSocket: conn["agent_socket_path"], connectTimeout: 10,
	}
	if n, err := strconv.Atoi(conn["per_dial_timeout"]); err == nil && n > 0 {
		t.connectTimeout = n
	}
	if t.user == "" {
		t.user = "root"
	}
	if s := conn["port"]; s != "" {
		t.port, _ = parsePort(s)
	}
	if key := conn["private_key"]; key != "" {
		t.privateKey, _ = ssh.ParseRawPrivateKey([]byte(key))
	}
	return t, nil
}

// validateConnection checks the connection fields that are known (unknown ones are skipped: preview).
func validateConnection(conn map[string]string, unknown map[string]bool) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if !unknown["host"] {
		add(validateHost(conn["host"]))
	}
	if u := conn["user"]; !unknown["user"] && u != "" {
		add(validateUser(u))
	}
	if p := conn["port"]; !unknown["port"] && p != "" {
		_, err := parsePort(p)
		add(err)
	}
	if k := conn["host_key"]; !unknown["host_key"] && k != "" {
		add(validateHostKey(k))
	}
	if f := conn["known_hosts_file"]; !unknown["known_hosts_file"] && f != "" {
		add(validateSSHPath("known_hosts_file", f))
	}
	if f := conn["agent_socket_path"]; !unknown["agent_socket_path"] && f != "" {
		add(validateSSHPath("agentSocketPath", f))
	}
	if n := conn["per_dial_timeout"]; !unknown["per_dial_timeout"] && n != "" {
		if v, err := strconv.Atoi(n); err != nil || v < 0 {
			add(fmt.Errorf("connection.perDialTimeout %q: want whole seconds (0: the default, 10)", n))
		}
	}
	// pulumi-command has these; this provider authenticates with a key (privateKey, agentSocketPath or the
	// provider's own) and connects directly, so it refuses them rather than ignore them.
	for _, k := range []string{"password", "private_key_password", "proxy"} {
		if _, ok := conn[k]; ok || unknown[k] {
			add(fmt.Errorf("connection.%s is not supported by this provider: use an unencrypted privateKey "+
				"or agentSocketPath, and a direct connection", connectionInputNames[k]))
		}
	}
	if !unknown["host_key"] && !unknown["known_hosts_file"] && conn["host_key"] == "" && conn["known_hosts_file"] == "" {
		add(errHostKeyRequired)
	}
	if k := conn["private_key"]; !unknown["private_key"] && k != "" {
		if _, err := ssh.ParseRawPrivateKey([]byte(k)); err != nil {
			// The parser's errors never quote the key.
			add(fmt.Errorf("connection.private_key: %v (an unencrypted OpenSSH or PEM private key)", err))
		}
	}
	return errs
}

// validateSecretEnvironment wants {"ENV_NAME": "configKey"}: environment variable names and the
// provider configuration keys they take their values from (names, never the secrets themselves).
func validateSecretEnvironment(v resource.PropertyValue) []error {
	v = plain(v)
	if v.IsNull() || v.ContainsUnknowns() {
		return nil
	}
	if !v.IsObject() {
		return []error{errors.New("secret_environment: want an object {ENV_NAME: providerConfigKey}")}
	}
	var errs []error
	for k, item := range v.ObjectValue() {
		item = plain(item)
		if !envName.MatchString(string(k)) {
			errs = append(errs, fmt.Errorf("secret_environment: %q is not an environment variable name", string(k)))
		}
		if !item.IsString() || item.StringValue() == "" {
			errs = append(errs, fmt.Errorf("secret_environment.%s: want the name of a provider config key", string(k)))
		}
	}
	return errs
}

// validateHost accepts an IPv4/IPv6 literal or a DNS name: nothing ssh could read as an option, a
// user, a port or a second argument.
func validateHost(h string) error {
	if h == "" {
		return errors.New("connection.host is empty")
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	if len(h) <= 253 && !strings.HasPrefix(h, "-") {
		ok := true
		for _, label := range strings.Split(h, ".") {
			if !dnsLabel.MatchString(label) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("connection.host %q: not an IP address or DNS name", h)
}

func validateUser(u string) error {
	if !posixUser.MatchString(u) {
		return fmt.Errorf("connection.user %q: not a POSIX user name ([a-z_][a-z0-9_-]{0,31})", u)
	}
	return nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n != float64(int(n)) || n < 1 || n > 65535 {
		return 0, fmt.Errorf("connection.port %q: not a port number (1-65535)", s)
	}
	return int(n), nil
}

// validateHostKey wants "<type> <base64>", a public key of an allowed type, on one line.
func validateHostKey(k string) error {
	if strings.ContainsFunc(k, unicode.IsControl) {
		return errors.New("connection.host_key: must be one line, \"<type> <base64>\" (no newline)")
	}
	parts := strings.Split(k, " ")
	if len(parts) != 2 || !hostKeyTypes[parts[0]] {
		return fmt.Errorf("connection.host_key %q: want \"<type> <base64>\" with type one of %s (no host name, no comment)",
			k, strings.Join(sortedKeys(boolKeys(hostKeyTypes)), ", "))
	}
	blob, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("connection.host_key: the key part is not base64: %v", err)
	}
	pub, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return fmt.Errorf("connection.host_key: not a %s public key: %v", parts[0], err)
	}
	if pub.Type() != parts[0] {
		return fmt.Errorf("connection.host_key: says %s but holds a %s key", parts[0], pub.Type())
	}
	return nil
}

// validateSSHPath refuses what ssh would split (whitespace) or expand (%tokens, ${VAR}) in a path option.
func validateSSHPath(field, f string) error {
	if strings.ContainsFunc(f, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) ||
		strings.ContainsAny(f, "%$") {
		return fmt.Errorf("connection.%s %q: no whitespace, %% or $ in the path", field, f)
	}
	return nil
}

func knownHostsName(host string, port int) string {
	if port == 22 {
		return host
	}
	return fmt.Sprintf("[%s]:%d", host, port)
}

// sshArgs is ssh's argv: options, then `--`, then the destination and the remote command. Options on
// the command line take precedence over ~/.ssh/config, so the host-key policy below holds whatever
// that file says.
func sshArgs(t sshTarget, knownHosts, agentSock string, withKnownHostsCommand bool) []string {
	args := []string{
		"-p", strconv.Itoa(t.port),
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + knownHosts,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "VerifyHostKeyDNS=no",
		"-o", "UpdateHostKeys=no",
		"-o", "ForwardAgent=no",
		"-o", "ConnectTimeout=" + strconv.Itoa(max(t.connectTimeout, 1)),
	}
	if withKnownHostsCommand {
		args = append(args, "-o", "KnownHostsCommand=none")
	}
	if agentSock != "" {
		args = append(args, "-o", "IdentityAgent="+agentSock, "-o", "IdentityFile=none")
	}
	// An IPv6 literal needs no brackets: ssh splits user@host at the last '@', and the port is -p.
	return append(args, "--", t.user+"@"+t.host, "sh -s")
}

// knownHostsCommandSupported: KnownHostsCommand (OpenSSH >= 8.5) is turned off where ssh knows it.
var knownHostsCommandSupported = sync.OnceValue(func() bool {
	return exec.Command("ssh", "-G", "-o", "KnownHostsCommand=none", "--", "probe.invalid").Run() == nil
})

// serveKey serves key from an in-memory agent on a unix socket at path until stop is called.
func serveKey(path string, key any) (stop func(), err error) {
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: key, Comment: pkgName}); err != nil {
		return nil, fmt.Errorf("connection.private_key: %v", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = agent.ServeAgent(keyring, c)
				c.Close()
			}()
		}
	}()
	return func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		_ = keyring.RemoveAll()
	}, nil
}

// socketBase is where the private temp dir goes: TMPDIR unless its path would be too long for a unix
// socket or would be expanded by ssh (%, $) or split (whitespace).
func socketBase() string {
	base := os.TempDir()
	if len(base) > 60 || strings.ContainsFunc(base, func(r rune) bool {
		return unicode.IsSpace(r) || r == '%' || r == '$'
	}) {
		return "/tmp"
	}
	return base
}

// connectionInputNames: the connection's fields as pulumi-command's SDK sends them (camelCase), by the
// names used here (vllm-fleet-command's own, snake_case, which it still accepts).
var connectionInputNames = map[string]string{
	"host": "host", "port": "port", "user": "user", "private_key": "privateKey", "host_key": "hostKey",
	"known_hosts_file": "known_hosts_file", "agent_socket_path": "agentSocketPath",
	"per_dial_timeout": "perDialTimeout", "dial_error_limit": "dialErrorLimit", "password": "password",
	"private_key_password": "privateKeyPassword", "proxy": "proxy",
}

// connectionFields flattens a connection object into strings (an object, e.g. a proxy, as "{...}") under
// the snake_case names, and names its unknown fields (an unknown connection reports all of them).
func connectionFields(v resource.PropertyValue) (map[string]string, map[string]bool) {
	known, unknown := map[string]string{}, map[string]bool{}
	v = plain(v)
	if v.IsComputed() || (v.IsOutput() && !v.OutputValue().Known) {
		for _, k := range []string{"host", "port", "user", "private_key", "host_key", "known_hosts_file"} {
			unknown[k] = true
		}
		return known, unknown
	}
	if !v.IsObject() {
		return known, unknown
	}
	snake := map[string]string{}
	for k, wire := range connectionInputNames {
		snake[wire] = k
	}
	for k, item := range v.ObjectValue() {
		name := string(k)
		if s, ok := snake[name]; ok {
			name = s
		}
		item = plain(item)
		if item.IsNull() {
			continue
		} else if item.ContainsUnknowns() {
			unknown[name] = true
		} else if s, ok := scalarString(item); ok {
			known[name] = s
		} else {
			known[name] = "{...}"
		}
	}
	return known, unknown
}

// plain unwraps secrets and known outputs.
func plain(v resource.PropertyValue) resource.PropertyValue {
	for {
		switch {
		case v.IsSecret():
			v = v.SecretValue().Element
		case v.IsOutput() && v.OutputValue().Known:
			v = v.OutputValue().Element
		default:
			return v
		}
	}
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func boolKeys(m map[string]bool) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if v {
			out[k] = ""
		}
	}
	return out
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

// commandTypes: the resource types served, by package (a binary serves one; both are accepted).
var commandTypes = map[string]string{
	localType: "local", remoteType: "remote",
	commandPkg + ":local:Command": "local", commandPkg + ":remote:Command": "remote",
}

// typeOf: the request's type, else its URN's (older engines send only the URN).
func typeOf(typ, urn string) string {
	if typ == "" && urn != "" {
		return string(resource.URN(urn).Type())
	}
	return typ
}

func checkType(typ, urn string) error {
	t := typeOf(typ, urn)
	if commandTypes[t] == "" {
		return fmt.Errorf("unknown resource type %q (this provider has %s)", t,
			strings.Join(sortedKeys(commandTypes), ", "))
	}
	return nil
}

func isRemote(typ, urn string) bool {
	return commandTypes[typeOf(typ, urn)] == "remote"
}

// interpreter is the local command's argv before the command itself: pulumi-command's `interpreter`
// input, by default /bin/sh -c.
func interpreter(props resource.PropertyMap) ([]string, error) {
	v := plain(props["interpreter"])
	if v.IsNull() {
		return []string{"/bin/sh", "-c"}, nil
	}
	if !v.IsArray() || len(v.ArrayValue()) == 0 {
		return nil, errors.New("interpreter: want a non-empty list of strings (program and arguments)")
	}
	var argv []string
	for _, item := range v.ArrayValue() {
		item = plain(item)
		if !item.IsString() || item.StringValue() == "" {
			return nil, errors.New("interpreter: want a non-empty list of strings (program and arguments)")
		}
		argv = append(argv, item.StringValue())
	}
	return argv, nil
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

// oldInputs: the resource's last inputs, which the engine sends with Diff, Update and Delete; an engine
// that does not falls back to the outputs (which echoed the inputs before this provider stopped doing so).
func oldInputs(inputs, outputs *structpb.Struct) *structpb.Struct {
	if inputs != nil {
		return inputs
	}
	return outputs
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
		if s, ok := scalarString(item); ok {
			out[string(k)] = s
		}
	}
	return out
}

func scalarString(item resource.PropertyValue) (string, bool) {
	switch {
	case item.IsString():
		return item.StringValue(), true
	case item.IsNumber():
		return strconv.FormatFloat(item.NumberValue(), 'f', -1, 64), true
	case item.IsBool():
		return strconv.FormatBool(item.BoolValue()), true
	}
	return "", false
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

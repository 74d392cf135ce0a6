// pulumi-language-python, minimal vllm-fleet build.
//
// The upstream language host module is not served by the Go module proxy that
// this project can reach, so this is a small independent implementation of the
// LanguageRuntime gRPC service on top of the Pulumi Go SDK (the same SDK
// packages the upstream host uses: python/toolchain, rpcutil, pulumirpc).
// It runs Python programs through the SDK's pulumi-language-python-exec shim
// and supports the Pulumi.yaml runtime options `toolchain` (pip|uv|poetry) and
// `virtualenv`. Code generation, packing, debugging and typechecking are not
// implemented (the CLI reports "not implemented" for those commands).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
)

const (
	execShim = "pulumi-language-python-exec"
	// Exit code the exec shim uses after it already printed an actionable error.
	exitBail = 32
)

// Lists the pulumi-plugin.json files of the installed distributions, as JSON.
const listPluginJSONs = `
import importlib.metadata as md, json
out = []
for dist in md.distributions():
    for f in dist.files or []:
        if f.name == "pulumi-plugin.json":
            try:
                out.append({"dist": dist.metadata["Name"], "version": dist.version,
                            "path": str(f.locate())})
            except Exception:
                pass
print(json.dumps(out))
`

func main() {
	showVersion := flag.Bool("version", false, "print the plugin version and exit")
	tracing := flag.String("tracing", "", "tracing endpoint, passed on to the program")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}

	self, err := os.Executable()
	if err != nil {
		fatalf("cannot locate own executable: %v", err)
	}
	shim := filepath.Join(filepath.Dir(self), execShim)
	if _, err := os.Stat(shim); err != nil {
		fatalf("missing %s next to the language host: %v", execShim, err)
	}

	host := &pythonHost{exec: shim, tracing: *tracing}
	if flag.NArg() > 0 {
		host.engine = flag.Arg(0)
	}
	host.runCtx, host.cancelRuns = context.WithCancel(context.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	done := make(chan bool)
	go func() { <-ctx.Done(); close(done) }()

	if host.engine != "" {
		if err := rpcutil.Healthcheck(ctx, host.engine, 5*time.Minute, stop); err != nil {
			fatalf("engine health check: %v", err)
		}
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: done,
		Init: func(s *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(s, host)
			return nil
		},
	})
	if err != nil {
		fatalf("cannot start gRPC server: %v", err)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fatalf("gRPC server stopped: %v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pulumi-language-python: "+format+"\n", args...)
	os.Exit(1)
}

type pythonHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	exec    string
	engine  string
	tracing string

	mu         sync.Mutex
	runCtx     context.Context
	cancelRuns context.CancelFunc
}

// pythonOptions maps the Pulumi.yaml `runtime.options` onto toolchain options.
func pythonOptions(info *pulumirpc.ProgramInfo, isPlugin bool) (toolchain.PythonOptions, error) {
	opts := toolchain.PythonOptions{Root: info.GetRootDirectory(), ProgramDir: info.GetProgramDirectory()}
	raw := map[string]any{}
	if info.GetOptions() != nil {
		raw = info.GetOptions().AsMap()
	}
	for key, value := range raw {
		s, ok := value.(string)
		if !ok {
			return opts, fmt.Errorf("runtime option %q must be a string", key)
		}
		switch key {
		case "virtualenv":
			opts.Virtualenv = s
		case "toolchain":
			switch s {
			case "pip":
				opts.Toolchain = toolchain.Pip
			case "uv":
				opts.Toolchain = toolchain.Uv
			case "poetry":
				opts.Toolchain = toolchain.Poetry
			default:
				return opts, fmt.Errorf("unsupported toolchain %q (want pip, uv or poetry)", s)
			}
		case "typechecker":
			return opts, errors.New("the `typechecker` runtime option is not supported by this language host build")
		default:
			// Unknown options are ignored, as upstream does.
		}
	}
	if isPlugin && opts.Virtualenv == "" && (opts.Toolchain == toolchain.Pip || opts.Toolchain == toolchain.Auto) {
		opts.Virtualenv = "venv"
	}
	return opts, nil
}

func resolve(info *pulumirpc.ProgramInfo, isPlugin bool) (toolchain.Toolchain, error) {
	opts, err := pythonOptions(info, isPlugin)
	if err != nil {
		return nil, err
	}
	return toolchain.ResolveToolchain(opts)
}

func (h *pythonHost) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// GetRequiredPackages reports the resource plugins named by the pulumi-plugin.json
// files of the packages installed in the program's Python environment.
func (h *pythonHost) GetRequiredPackages(
	ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	tc, err := resolve(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", listPluginJSONs)
	if err != nil {
		return nil, err
	}
	cmd.Dir = req.GetInfo().GetProgramDirectory()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing installed Pulumi packages: %w", err)
	}
	var found []struct{ Dist, Version, Path string }
	if err := json.Unmarshal(out, &found); err != nil {
		return nil, fmt.Errorf("listing installed Pulumi packages: %w", err)
	}
	packages := []*pulumirpc.PackageDependency{}
	for _, f := range found {
		meta, err := plugin.LoadPulumiPluginJSON(f.Path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		if !meta.Resource {
			continue
		}
		name, ver := meta.Name, meta.Version
		if name == "" {
			name = strings.TrimPrefix(strings.ToLower(f.Dist), "pulumi-")
		}
		if ver == "" {
			ver = f.Version // fine for plain X.Y.Z releases
		}
		if !strings.HasPrefix(ver, "v") {
			ver = "v" + ver
		}
		dep := &pulumirpc.PackageDependency{Kind: "resource", Name: name, Version: ver, Server: meta.Server}
		if p := meta.Parameterization; p != nil {
			dep.Parameterization = &pulumirpc.PackageParameterization{Name: p.Name, Version: p.Version, Value: p.Value}
		}
		packages = append(packages, dep)
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: packages}, nil
}

func (h *pythonHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	if req.GetAttachDebugger() {
		return &pulumirpc.RunResponse{Error: "debugging is not supported by this language host build"}, nil
	}
	tc, err := resolve(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	if err := tc.ValidateVenv(ctx); err != nil {
		return nil, err
	}

	args := []string{h.exec}
	flagArg := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	flagArg("monitor", req.GetMonitorAddress())
	flagArg("engine", h.engine)
	flagArg("project", req.GetProject())
	flagArg("root_directory", req.GetInfo().GetRootDirectory())
	flagArg("stack", req.GetStack())
	flagArg("pwd", req.GetPwd())
	flagArg("dry_run", strconv.FormatBool(req.GetDryRun()))
	flagArg("parallel", strconv.Itoa(int(req.GetParallel())))
	flagArg("tracing", h.tracing)
	flagArg("organization", req.GetOrganization())
	args = append(args, req.GetInfo().GetEntryPoint())
	args = append(args, req.GetArgs()...)

	config := ""
	if req.GetConfig() != nil {
		b, err := json.Marshal(req.GetConfig())
		if err != nil {
			return nil, err
		}
		config = string(b)
	}
	secretKeys := "[]"
	if req.GetConfigSecretKeys() != nil {
		b, err := json.Marshal(req.GetConfigSecretKeys())
		if err != nil {
			return nil, err
		}
		secretKeys = string(b)
	}

	h.mu.Lock()
	runCtx, cancel := context.WithCancel(h.runCtx)
	h.mu.Unlock()
	defer cancel()
	stopAfter := context.AfterFunc(ctx, cancel)
	defer stopAfter()

	cmd, err := tc.Command(runCtx, args...)
	if err != nil {
		return nil, err
	}
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	if config != "" {
		env = append(env, "PULUMI_CONFIG="+config)
	}
	cmd.Env = append(env, "PULUMI_CONFIG_SECRET_KEYS="+secretKeys)

	if err := cmd.Run(); err != nil {
		_ = os.Stdout.Sync()
		_ = os.Stderr.Sync()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if exitErr.ExitCode() == exitBail {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("program exited with non-zero exit code: %d", exitErr.ExitCode()),
			}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("problem executing program (could not run language executor): %v", err),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// Cancel stops any running program; later Runs get a fresh context.
func (h *pythonHost) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancelRuns()
	h.runCtx, h.cancelRuns = context.WithCancel(context.Background())
	return &emptypb.Empty{}, nil
}

func (h *pythonHost) InstallDependencies(
	req *pulumirpc.InstallDependenciesRequest, server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	tc, err := resolve(req.GetInfo(), req.GetIsPlugin())
	if err != nil {
		return err
	}
	closer, stdout, stderr, err := rpcutil.MakeInstallDependenciesStreams(server, req.GetIsTerminal())
	if err != nil {
		return err
	}
	defer closer.Close()
	fmt.Fprintf(stdout, "Installing dependencies...\n\n")
	if err := tc.InstallDependencies(server.Context(), req.GetInfo().GetProgramDirectory(),
		req.GetUseLanguageVersionTools(), true, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Finished installing dependencies\n\n")
	return closer.Close()
}

func (h *pythonHost) RuntimeOptionsPrompts(
	context.Context, *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

func (h *pythonHost) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := resolve(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	info, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{
		Executable: info.PythonExecutable,
		Version:    info.PythonVersion.String(),
		Metadata:   map[string]string{"languageHost": "vllm-fleet minimal " + version.Version},
	}, nil
}

func (h *pythonHost) GetProgramDependencies(
	ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := resolve(req.GetInfo(), false)
	if err != nil {
		return nil, err
	}
	pkgs, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, err
	}
	deps := make([]*pulumirpc.DependencyInfo, 0, len(pkgs))
	for _, p := range pkgs {
		deps = append(deps, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: deps}, nil
}

func (h *pythonHost) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "use GetRequiredPackages")
}

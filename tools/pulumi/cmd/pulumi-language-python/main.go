// Command pulumi-language-python is a minimal Pulumi language host for Python programs.
//
// Why this exists: the upstream host lives in the nested Go module
// github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, which the Go module proxy we can
// reach does not serve (403 "This module version is not available"). The engine <-> language host
// contract is small, so this host implements the parts `pulumi preview/up/destroy/refresh/install/about`
// need, on top of the published github.com/pulumi/pulumi/sdk/v3 gRPC definitions:
//
//   - Run: spawns `<python> -u pulumi-language-python-exec --monitor ... <program>`, where
//     pulumi-language-python-exec is the executor script shipped in the sdk/v3 module (python/cmd) and is
//     expected next to this binary (symlinks are resolved) or on $PATH.
//   - GetRequiredPackages/GetRequiredPlugins: reads pulumi-plugin.json from the installed Python
//     distributions (what pulumi_kubernetes & co. ship), so the engine knows which provider plugins to load.
//   - InstallDependencies: creates the configured virtualenv and pip-installs requirements.txt.
//   - RunPlugin: runs Python plugins, notably policy packs (`pulumi preview --policy-pack <dir>`).
//   - GetPluginInfo, About, GetProgramDependencies, RuntimeOptionsPrompts, Handshake.
//
// Python selection mirrors upstream's runtime options in Pulumi.yaml:
//
//	runtime:
//	  name: python
//	  options:
//	    virtualenv: venv      # relative to the project root (Pulumi.yaml dir), or absolute
//	    toolchain: pip|uv     # uv => .venv when virtualenv is unset; poetry is not supported
//
// Without a virtualenv it runs $PULUMI_PYTHON_CMD or python3 (then python) from $PATH.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// version is stamped by tools/toolchain.sh (-ldflags -X main.version=...).
var version = "3.276.0"

const (
	execScriptName = "pulumi-language-python-exec"
	// Exit code the exec script uses after it already reported a user-actionable error.
	actionableExitCode = 32
)

func main() {
	engineAddress := ""
	tracing := ""
	for i := 1; i < len(os.Args); i++ {
		a := os.Args[i]
		switch {
		case a == "-tracing" || a == "--tracing":
			if i+1 < len(os.Args) {
				tracing = os.Args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-tracing=") || strings.HasPrefix(a, "--tracing="):
			tracing = a[strings.Index(a, "=")+1:]
		case strings.HasPrefix(a, "-"):
			// Unknown flags (e.g. -root=..., -virtualenv=... from other engine versions) are ignored.
		default:
			engineAddress = a // the engine passes its address as the last positional argument
		}
	}

	host := &pythonHost{engineAddress: engineAddress, tracing: tracing}
	// Exit with the engine: a killed `pulumi up` (SIGKILL, OOM) cannot stop its plugins, and without this check the
	// host and the program it runs would stay behind. The upstream hosts watch the engine the same way
	// (rpcutil.Healthcheck, sdk/go/common/util/rpcutil/health.go: it cancels once the engine's health service stops
	// answering); this one polls every few seconds, so what is left after a killed engine ends within that time.
	if engineAddress != "" {
		if err := rpcutil.Healthcheck(context.Background(), engineAddress, engineHealthInterval, engineGone); err != nil {
			fmt.Fprintf(os.Stderr, "fatal: could not watch the engine at %s: %v\n", engineAddress, err)
			os.Exit(1)
		}
	}
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, host)
			return nil
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fatal: could not start language host RPC server: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		fmt.Fprintf(os.Stderr, "fatal: language host RPC stopped serving: %v\n", err)
		os.Exit(1)
	}
}

type pythonHost struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	engineAddress string
	tracing       string
}

// ---- python resolution -------------------------------------------------------------------------

type pyEnv struct {
	python     string // interpreter to run
	virtualenv string // absolute venv dir, "" when none
}

func optionString(opts *structpb.Struct, key string) string {
	if opts == nil {
		return ""
	}
	if v, ok := opts.GetFields()[key]; ok {
		return v.GetStringValue()
	}
	return ""
}

func rootDir(info *pulumirpc.ProgramInfo, fallback string) string {
	if info != nil && info.GetRootDirectory() != "" {
		return info.GetRootDirectory()
	}
	if fallback != "" {
		return fallback
	}
	wd, _ := os.Getwd()
	return wd
}

func virtualenvDir(info *pulumirpc.ProgramInfo, root string) string {
	opts := info.GetOptions()
	venv := optionString(opts, "virtualenv")
	if venv == "" && optionString(opts, "toolchain") == "uv" {
		venv = ".venv"
	}
	if venv == "" {
		return ""
	}
	if !filepath.IsAbs(venv) {
		venv = filepath.Join(root, venv)
	}
	return filepath.Clean(venv)
}

func resolvePython(info *pulumirpc.ProgramInfo, root string, mustExist bool) (pyEnv, error) {
	if tc := optionString(info.GetOptions(), "toolchain"); tc == "poetry" {
		return pyEnv{}, errors.New("pulumi-language-python (dynamo build): the 'poetry' toolchain is not supported; " +
			"use `toolchain: pip` with `virtualenv: <dir>`")
	}
	if venv := virtualenvDir(info, root); venv != "" {
		py := filepath.Join(venv, "bin", "python")
		if _, err := os.Stat(py); err != nil && mustExist {
			return pyEnv{}, fmt.Errorf("the 'virtualenv' option in Pulumi.yaml is set to %q, but %q is not a "+
				"virtual environment (missing bin/python); run `pulumi install` or:\n"+
				"    python3 -m venv %s && %s -m pip install -r %s",
				venv, venv, venv, py, filepath.Join(root, "requirements.txt"))
		}
		return pyEnv{python: py, virtualenv: venv}, nil
	}
	if cmd := os.Getenv("PULUMI_PYTHON_CMD"); cmd != "" {
		return pyEnv{python: cmd}, nil
	}
	for _, c := range []string{"python3", "python"} {
		if p, err := exec.LookPath(c); err == nil {
			return pyEnv{python: p}, nil
		}
	}
	return pyEnv{}, errors.New("could not find python3 or python on $PATH (set PULUMI_PYTHON_CMD)")
}

// environ returns the process environment adjusted for running inside the virtualenv (if any).
func (e pyEnv) environ(extra ...string) []string {
	return e.environFrom(os.Environ(), extra...)
}

// environFrom adjusts base (a KEY=VALUE list) for running inside the virtualenv (if any) and appends extra.
func (e pyEnv) environFrom(base []string, extra ...string) []string {
	env := make([]string, 0, len(base)+len(extra)+3)
	path := os.Getenv("PATH")
	for _, kv := range base {
		if strings.HasPrefix(kv, "PATH=") {
			path = strings.TrimPrefix(kv, "PATH=")
		}
		if e.virtualenv != "" && (strings.HasPrefix(kv, "PYTHONHOME=") || strings.HasPrefix(kv, "PATH=")) {
			continue
		}
		if e.virtualenv != "" && (strings.HasPrefix(kv, "PYTHONHOME=") || strings.HasPrefix(kv, "PATH=")) {
			continue
		}
		env = append(env, kv)
	}
	if e.virtualenv != "" {
		env = append(env,
			"PATH="+filepath.Join(e.virtualenv, "bin")+string(os.PathListSeparator)+path,
			"VIRTUAL_ENV="+e.virtualenv,
			// Read by pulumi-resource-pulumi-python (dynamic providers).
			"PULUMI_RUNTIME_VIRTUALENV="+e.virtualenv,
		)
	}
	return append(env, extra...)
}

func findExecScript() (string, error) {
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		cand := filepath.Join(filepath.Dir(self), execScriptName)
		if _, err := os.Stat(cand); err == nil {
			return cand, nil
		}
	}
	if p, err := exec.LookPath(execScriptName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("could not find %s next to the language host or on $PATH", execScriptName)
}

// ---- RPCs --------------------------------------------------------------------------------------

func (h *pythonHost) Handshake(ctx context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	if req.GetEngineAddress() != "" {
		h.engineAddress = req.GetEngineAddress()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *pythonHost) GetPluginInfo(ctx context.Context, _ *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (h *pythonHost) RuntimeOptionsPrompts(ctx context.Context, _ *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

// pluginScan lists the pulumi-plugin.json files of the installed distributions.
const pluginScan = `
import json, sys
try:
    import importlib.metadata as md
except ImportError:
    print("[]"); sys.exit(0)
out = []
for dist in md.distributions():
    for f in (dist.files or []):
        if f.name != "pulumi-plugin.json":
            continue
        try:
            data = json.loads(f.read_text())
        except Exception:
            continue
        out.append({"dist": dist.metadata["Name"], "distVersion": dist.version, "plugin": data})
print(json.dumps(out))
`

type pluginJSON struct {
	Resource         bool   `json:"resource"`
	Name             string `json:"name"`
	Version          string `json:"version"`
	Server           string `json:"server"`
	Parameterization *struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Value   []byte `json:"value"` // base64 in JSON, decoded by encoding/json
	} `json:"parameterization"`
}

func (h *pythonHost) requiredPackages(info *pulumirpc.ProgramInfo, fallbackRoot string,
) ([]*pulumirpc.PackageDependency, error) {
	root := rootDir(info, fallbackRoot)
	py, err := resolvePython(info, root, true)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(py.python, "-c", pluginScan)
	cmd.Dir = root
	cmd.Env = py.environ()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing installed Pulumi packages with %s: %w", py.python, err)
	}
	var found []struct {
		Dist        string     `json:"dist"`
		DistVersion string     `json:"distVersion"`
		Plugin      pluginJSON `json:"plugin"`
	}
	if err := json.Unmarshal(out, &found); err != nil {
		return nil, fmt.Errorf("parsing installed Pulumi packages: %w", err)
	}
	seen := map[string]bool{}
	var deps []*pulumirpc.PackageDependency
	for _, f := range found {
		p := f.Plugin
		if !p.Resource {
			continue
		}
		name := p.Name
		if name == "" {
			name = strings.TrimPrefix(strings.ReplaceAll(strings.ToLower(f.Dist), "_", "-"), "pulumi-")
		}
		ver := p.Version
		if ver == "" {
			ver = f.DistVersion
		}
		if ver != "" && !strings.HasPrefix(ver, "v") {
			ver = "v" + ver
		}
		key := name + "@" + ver
		if seen[key] {
			continue
		}
		seen[key] = true
		dep := &pulumirpc.PackageDependency{Name: name, Kind: "resource", Version: ver, Server: p.Server}
		if p.Parameterization != nil {
			dep.Parameterization = &pulumirpc.PackageParameterization{
				Name: p.Parameterization.Name, Version: p.Parameterization.Version, Value: p.Parameterization.Value,
			}
		}
		deps = append(deps, dep)
	}
	return deps, nil
}

func (h *pythonHost) GetRequiredPackages(ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	deps, err := h.requiredPackages(req.GetInfo(), "")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: deps}, nil
}

func (h *pythonHost) GetRequiredPlugins(ctx context.Context, req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	deps, err := h.requiredPackages(req.GetInfo(), req.GetPwd())
	if err != nil {
		return nil, err
	}
	plugins := make([]*pulumirpc.PluginDependency, 0, len(deps))
	for _, d := range deps {
		if d.Parameterization != nil {
			continue
		}
		plugins = append(plugins, &pulumirpc.PluginDependency{
			Name: d.Name, Kind: d.Kind, Version: d.Version, Server: d.Server,
		})
	}
	return &pulumirpc.GetRequiredPluginsResponse{Plugins: plugins}, nil
}

func (h *pythonHost) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	info := req.GetInfo()
	root := rootDir(info, req.GetPwd())
	py, err := resolvePython(info, root, true)
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	script, err := findExecScript()
	if err != nil {
		return nil, err
	}

	args := []string{"-u", script}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engineAddress)
	add("project", req.GetProject())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("tracing", h.tracing)
	add("organization", req.GetOrganization())
	if info != nil {
		add("root_directory", info.GetRootDirectory())
	}
	program := req.GetProgram()
	if info != nil && info.GetProgramDirectory() != "" {
		program = info.GetProgramDirectory()
		if ep := info.GetEntryPoint(); ep != "" && ep != "." {
			program = filepath.Join(program, ep)
		}
	}
	if program == "" {
		program = "."
	}
	args = append(args, program)
	args = append(args, req.GetArgs()...)

	config := req.GetConfig()
	if config == nil {
		config = map[string]string{} // the SDK expects a JSON object, not null
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("serializing config: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secretJSON, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("serializing config secret keys: %w", err)
	}

	cmd := exec.CommandContext(ctx, py.python, args...)
	cmd.Dir = req.GetPwd()
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Env = py.environ("PULUMI_CONFIG="+string(configJSON), "PULUMI_CONFIG_SECRET_KEYS="+string(secretJSON))
	if err := runProgramGroup(cmd); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if exitErr.ExitCode() == actionableExitCode {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("Program exited with non-zero exit code: %d", exitErr.ExitCode()),
			}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("Problem executing program (could not run language executor): %v", err),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// streamWriter forwards process output to a gRPC server stream. exec.Cmd copies stdout and stderr from two
// goroutines and grpc streams must not be written concurrently, so all writers of a stream share one mutex.
type streamWriter struct {
	mu     *sync.Mutex
	send   func(b []byte, stderr bool) error
	stderr bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.send(append([]byte(nil), p...), w.stderr); err != nil {
		return 0, err
	}
	return len(p), nil
}

func streamWriters(send func(b []byte, stderr bool) error) (stdout, stderr streamWriter) {
	mu := &sync.Mutex{}
	return streamWriter{mu: mu, send: send}, streamWriter{mu: mu, send: send, stderr: true}
}

func (h *pythonHost) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	server grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	info := req.GetInfo()
	root := rootDir(info, req.GetDirectory())
	stdout, stderr := streamWriters(func(b []byte, isErr bool) error {
		if isErr {
			return server.Send(&pulumirpc.InstallDependenciesResponse{Stderr: b})
		}
		return server.Send(&pulumirpc.InstallDependenciesResponse{Stdout: b})
	})
	run := func(name string, args ...string) error {
		fmt.Fprintf(stdout, "$ %s %s\n", name, strings.Join(args, " "))
		cmd := exec.CommandContext(server.Context(), name, args...)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = io.Writer(stdout), io.Writer(stderr)
		return cmd.Run()
	}

	py, err := resolvePython(info, root, false)
	if err != nil {
		return err
	}
	if py.virtualenv != "" {
		if _, err := os.Stat(py.python); err != nil {
			base := os.Getenv("PULUMI_PYTHON_CMD")
			if base == "" {
				base = "python3"
			}
			if err := run(base, "-m", "venv", py.virtualenv); err != nil {
				return fmt.Errorf("creating virtualenv %s: %w", py.virtualenv, err)
			}
		}
	}
	reqTxt := filepath.Join(root, "requirements.txt")
	if _, err := os.Stat(reqTxt); err == nil {
		if err := run(py.python, "-m", "pip", "install", "-r", reqTxt); err != nil {
			return fmt.Errorf("installing %s: %w", reqTxt, err)
		}
	} else {
		fmt.Fprintf(stdout, "no requirements.txt in %s; nothing to install\n", root)
	}
	return nil
}

func (h *pythonHost) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	root := rootDir(req.GetInfo(), "")
	py, err := resolvePython(req.GetInfo(), root, false)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(py.python, "-c", "import platform; print(platform.python_version())").Output()
	if err != nil {
		return nil, fmt.Errorf("running %s: %w", py.python, err)
	}
	meta := map[string]string{"languageHost": "dynamo-minimal"}
	if py.virtualenv != "" {
		meta["virtualenv"] = py.virtualenv
	}
	return &pulumirpc.AboutResponse{
		Executable: py.python, Version: strings.TrimSpace(string(out)), Metadata: meta,
	}, nil
}

func (h *pythonHost) GetProgramDependencies(ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	root := rootDir(req.GetInfo(), req.GetPwd())
	py, err := resolvePython(req.GetInfo(), root, true)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(py.python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check")
	cmd.Env = py.environ()
	out, err := cmd.Output()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "pip list failed: %v", err)
	}
	var pkgs []struct{ Name, Version string }
	if err := json.Unmarshal(out, &pkgs); err != nil {
		return nil, fmt.Errorf("parsing pip list output: %w", err)
	}
	deps := make([]*pulumirpc.DependencyInfo, 0, len(pkgs))
	for _, p := range pkgs {
		deps = append(deps, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return &pulumirpc.GetProgramDependenciesResponse{Dependencies: deps}, nil
}

// RunPlugin runs a plugin written in Python: policy packs (PulumiPolicy.yaml, kind "analyzer"; this is how the
// engine starts `--policy-pack <dir>` packs, there is no separate pulumi-analyzer-policy-python) and providers
// (PulumiPlugin.yaml). The program is run as `<python> -u <program dir or entry point> <args...>` and must print
// its gRPC port on stdout, which the engine reads from the forwarded stdout.
func (h *pythonHost) RunPlugin(req *pulumirpc.RunPluginRequest,
	server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse],
) error {
	info := req.GetInfo()
	root := rootDir(info, req.GetPwd())
	py, err := resolvePython(info, root, true)
	if err != nil {
		return err
	}
	program := req.GetProgram()
	if info != nil && info.GetProgramDirectory() != "" {
		program = info.GetProgramDirectory()
		if ep := info.GetEntryPoint(); ep != "" && ep != "." {
			program = filepath.Join(program, ep)
		}
	}
	if program == "" {
		return errors.New("RunPlugin: no program directory given")
	}
	base := req.GetEnv()
	if len(base) == 0 {
		base = os.Environ()
	}

	stdout, stderr := streamWriters(func(b []byte, isErr bool) error {
		if isErr {
			return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: b}})
		}
		return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: b}})
	})
	args := append([]string{"-u", program}, req.GetArgs()...)
	cmd := exec.CommandContext(server.Context(), py.python, args...)
	cmd.Dir = req.GetPwd()
	cmd.Env = py.environFrom(base)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	code := int32(0)
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return fmt.Errorf("running plugin %s: %w", program, err)
		}
		code = int32(exitErr.ExitCode())
	}
	return server.Send(&pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: code}})
}

// runProgramGroup runs the user's program in a process group of its own. When an update is cancelled
// or fails, the engine interrupts its plugins' process group (sdk/go/common/resource/plugin/plugin.go,
// cmdutil.InterruptChildren); a program in the host's group would get that SIGINT as a KeyboardInterrupt
// inside a blocked gRPC call and print a Python traceback under the engine's own error. Here the host
// takes the signal and ends the program's group quietly instead (also when the request is cancelled).
func runProgramGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return err
	}
	programs.Store(cmd.Process.Pid, struct{}{})
	defer programs.Delete(cmd.Process.Pid)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	return cmd.Wait()
}

// engineHealthInterval: how often the host asks the engine's health service whether it is still there.
const engineHealthInterval = 3 * time.Second

// programs: the process groups of the programs this host is running (runProgramGroup), ended with the host.
var programs sync.Map

// engineGone ends every running program's process group and the host itself: the engine that started them no
// longer answers, so nothing they do can reach the state.
func engineGone() {
	programs.Range(func(pid, _ any) bool {
		_ = syscall.Kill(-pid.(int), syscall.SIGKILL)
		return true
	})
	fmt.Fprintln(os.Stderr, "pulumi-language-python: the engine no longer answers its health check; stopping the program and exiting")
	os.Exit(1)
}

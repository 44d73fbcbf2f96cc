// nodeadm-check: what nodeadm makes of a node's user data, for tests/test_nodeadm.py.
//
// tools/nodeadm.sh copies this file into a copy of nodeadm's source (awslabs/amazon-eks-ami nodeadm/, from the
// reference data) as cmd/nodeadm-check, so it uses nodeadm's own internal packages: the config provider chain that
// `nodeadm config check` and a booting node use (MIME multipart user data, NodeConfig parts merged in order), the
// NodeConfig validation, and the containerd package's snapshotter decision.
//
// Usage: nodeadm-check -c file:///path/to/user-data -cpus 192 -memory-gib 2048
// Prints one JSON object: the merged feature gates, the instance local-storage strategy, whether containerd would
// use the SOCI (parallel pull) snapshotter on a node with that many CPUs and that much memory, and the snapshotter the
// containerd config nodeadm generates for that node names (its containerd 1.x and 2.x templates; export.go.txt makes
// the package's generation callable from here).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/api"
	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/configprovider"
	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/containerd"
	"github.com/awslabs/amazon-eks-ami/nodeadm/internal/system"
	"github.com/pelletier/go-toml/v2"
)

// snapshotters: every `snapshotter` value in a containerd config (TOML), wherever its schema puts the CRI plugin.
func snapshotters(config []byte) ([]string, error) {
	var doc map[string]any
	if err := toml.Unmarshal(config, &doc); err != nil {
		return nil, err
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				if s, ok := x.(string); ok && k == "snapshotter" {
					out = append(out, s)
				}
				walk(x)
			}
		}
	}
	walk(doc)
	return out, nil
}

const blockSize int64 = 0x8000000 // 128 MiB memory blocks, as the kernel reports them under /sys/devices/system/memory

// resources: a node with cpus cores and memGiB of online memory, read through nodeadm's own fake sysfs.
func resources(cpus int, memGiB int64) system.Resources {
	files := map[string]string{"/sys/devices/system/memory/block_size_bytes": fmt.Sprintf("%x", blockSize)}
	for i := int64(0); i < memGiB*1024*1024*1024/blockSize; i++ {
		files[fmt.Sprintf("/sys/devices/system/memory/memory%d/online", i)] = "1"
	}
	for i := 0; i < cpus; i++ {
		files[fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/core_id", i)] = strconv.Itoa(i)
		files[fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", i)] = "0"
	}
	return system.NewResources(system.FakeFileSystem{Files: files})
}

func main() {
	source := flag.String("c", "", "config source, e.g. file:///tmp/user-data")
	cpus := flag.Int("cpus", 192, "the node's CPU count")
	mem := flag.Int64("memory-gib", 2048, "the node's memory in GiB")
	flag.Parse()
	chain, err := configprovider.BuildConfigProviderChain([]string{*source})
	if err == nil {
		var cfg *api.NodeConfig
		if cfg, err = chain.Provide(); err == nil {
			if err = api.ValidateNodeConfig(cfg); err == nil {
				res := resources(*cpus, *mem)
				generated := map[string][]string{}
				for name, v2 := range map[string]bool{"containerd1": false, "containerd2": true} {
					var config []byte
					if config, err = containerd.GenerateConfig(cfg, res, v2); err == nil {
						generated[name], err = snapshotters(config)
					}
					if err != nil {
						break
					}
				}
				if err == nil {
					out := map[string]any{
						"featureGates": cfg.Spec.FeatureGates,
						"localStorage": cfg.Spec.Instance.LocalStorage.Strategy,
						"soci":         containerd.UseSOCISnapshotter(cfg, res),
						"snapshotters": generated,
					}
					_ = json.NewEncoder(os.Stdout).Encode(out)
					return
				}
			}
		}
	}
	fmt.Fprintln(os.Stderr, "nodeadm-check:", err)
	os.Exit(1)
}

// Runs srt's own macOS Seatbelt profile generator (from the installed npm
// package) on srt-format settings and prints the profile it would hand to
// sandbox-exec. Used by the differential test in test_macos_vs_srt.py.
//
// Input (stdin, JSON): {package, home, cwd, settings, httpProxyPort,
// socksProxyPort, allowPty}. Output (stdout): the profile text.
//
// Only glue lives here (what srt's SandboxManager does before it calls the
// generator on macOS); the generator is srt's exported
// wrapCommandWithSandboxMacOS. It never starts a process or a proxy.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const input = JSON.parse(readFileSync(0, 'utf8'));
// The generator reads the platform, the home directory and the working
// directory from the process: make them the macOS user's.
Object.defineProperty(process, 'platform', { value: 'darwin' });
process.env.HOME = input.home;
process.cwd = () => input.cwd;

const dist = path.join(input.package, 'dist', 'sandbox');
const mac = await import(pathToFileURL(path.join(dist, 'macos-sandbox-utils.js')).href);
const utils = await import(pathToFileURL(path.join(dist, 'sandbox-utils.js')).href);

const fs = input.settings.filesystem;
const net = input.settings.network;
const strip = (items) => (items ?? []).map((p) => utils.removeTrailingGlobSuffix(p));
const writeConfig = {
  allowOnly: [
    ...utils.getDefaultWritePaths({ denyRead: fs.denyRead ?? [], allowRead: fs.allowRead }),
    ...strip(fs.allowWrite),
  ],
  denyWithinAllow: strip(fs.denyWrite),
};
const readConfig = { denyOnly: strip(fs.denyRead), allowWithinDeny: strip(fs.allowRead) };

const wrapped = mac.wrapCommandWithSandboxMacOS({
  command: 'true',
  needsNetworkRestriction: true,
  httpProxyPort: input.httpProxyPort,
  socksProxyPort: input.socksProxyPort,
  readConfig,
  writeConfig,
  allowUnixSockets: net.allowUnixSockets,
  allowAllUnixSockets: net.allowAllUnixSockets,
  allowLocalBinding: net.allowLocalBinding,
  allowMachLookup: input.allowMachLookup,
  allowPty: input.allowPty,
  allowGitConfig: false,
  enableWeakerNetworkIsolation: input.enableWeakerNetworkIsolation ?? false,
  binShell: 'sh',
});
process.stdout.write(JSON.stringify({ wrapped }));

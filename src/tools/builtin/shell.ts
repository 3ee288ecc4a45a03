/**
 * S4 §4 `shell.exec {cmd, timeout_s=20}`: "runs in a sandbox cwd and is
 * allowlisted; deny dangerous substrings". Risk `side_effect` (S1 §3.3).
 *
 * A call is checked, in this order:
 *  1. dangerous substrings (`policy.denied`): each rule in DANGEROUS_COMMANDS is
 *     matched against the command as written and with its quotes and
 *     backslashes removed, so `-e'x'ec` is still `-exec`. Command substitution
 *     (`$(…)`, backticks, `<(…)`, `>(…)`) and expansions that hide characters
 *     (`${…}`, `$'…'`) are refused outright: they run or spell text that the
 *     allowlist below never sees. Writing to `/dev/null` is the one device
 *     redirect allowed (`2>/dev/null` is harmless and common).
 *  2. the allowlist (`policy.denied`): the command is split, outside quotes,
 *     at `;`, `&&`, `||`, `|`, `|&`, `&` and newlines, and the first word of
 *     every part must be allowlisted — so `ls; rm x` and `cat f | sh` fail.
 *     A first word that is a path, a variable assignment or a subshell is not
 *     allowlisted either (fail closed).
 *  3. the option allowlist (`policy.denied`, ./shell-allow.ts): `git` runs only
 *     read-only subcommands with listed options, `find` only read-only
 *     predicates, and no redirection writes into `.git/` (issue 20 §6).
 *  4. the sandbox: commands run only through an injected sandbox. The gateway
 *     Worker has no sandbox binding, so the registered tool fails closed with
 *     `sandbox.unavailable` (DESIGN "Where tools run").
 *
 * These checks are defence in depth, not the boundary: the sandbox is.
 */
import { z } from "zod";
import { defineTool, type ToolDefinition, type ToolOutcome } from "../registry";
import { ABORTED, capUtf8, timedOut, untilAborted } from "./common";
import { parseCommandLine, refusalFor } from "./shell-allow";

/** Commands allowed by default (the first word of each part of `cmd`). */
export const DEFAULT_SHELL_ALLOW = ["ls", "cat", "echo", "pwd", "head", "tail", "wc", "grep", "find", "git"] as const;
/** Each of stdout and stderr is cut to this many UTF-8 bytes (64 KiB). */
export const MAX_SHELL_OUTPUT_BYTES = 65_536;
export const MAX_CMD_CHARS = 4096;

/** Runs a command somewhere isolated; the only way `shell.exec` executes anything. */
export interface ShellSandbox {
  exec(cmd: string, options: { timeoutMs: number; signal: AbortSignal }): Promise<{ exit_code: number; stdout: string; stderr: string }>;
}

/** What `shell.exec` refuses before anything runs: what it is called in the error, and how it is recognised. */
export const DANGEROUS_COMMANDS: readonly { label: string; pattern: RegExp }[] = [
  // Tab, newline and carriage return are whitespace and separators; every other C0/C1 control and DEL is refused.
  { label: "a control character", pattern: /(?![\t\n\r])\p{Cc}/u },
  // An `r` option and an `f` option anywhere in the same command: rm -rf, rm -fr, rm -R -f, rm --recursive --force.
  {
    label: '"rm -rf" (a recursive forced delete)',
    pattern: /\brm\b(?=[^;&|\n]*\s-(?:[a-z]*r|-recursive))(?=[^;&|\n]*\s-(?:[a-z]*f|-force))/i,
  },
  { label: '"sudo" (privilege escalation)', pattern: /\b(?:sudo|doas)\b/ },
  { label: '"mkfs" (formatting a filesystem)', pattern: /\bmkfs\b/ },
  { label: '"dd if=" (raw disk copy)', pattern: /\bdd\s[^;&|\n]*\b(?:if|of)=/ },
  { label: '":(){" (a fork bomb)', pattern: /:\s*\(\s*\)\s*\{/ },
  { label: '"> /dev/" (writing to a device)', pattern: />\s*&?\s*\/dev\/(?!null\b)/ },
  { label: '"chmod 777" (world-writable permissions)', pattern: /\bchmod\s+(?:-\S+\s+)*0?777\b/ },
  {
    label: '"curl … | sh" (running a download)',
    pattern: /\b(?:curl|wget)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:(?:ba|da|z|k|c|tc|fi|a)?sh|python[0-9.]*|perl|ruby|node|php)\b/,
  },
  { label: '"$(" or a backtick (command substitution)', pattern: /\$\(|`/ },
  { label: '"<(" or ">(" (process substitution)', pattern: /[<>]\(/ },
  { label: '"${" or "$\'" (an expansion that hides characters)', pattern: /\$\{|\$'/ },
  { label: '"-exec" (find running commands or deleting)', pattern: /(?<![\w-])-(?:exec|execdir|ok|okdir|delete)(?![\w-])/ },
  // git's global `-c key=value`/`--config-env` (case matters: `git -C dir` is fine, and so is `git grep -c`),
  // and options or transports that name a program for git to run.
  {
    label: '"git -c" (git configured to run programs)',
    pattern:
      /\bgit(?:\s+-\S+(?:\s+[^-\s]\S*)?)*?\s+(?:-c(?:\s|$)|--config-env)|\bgit\b[^;&|\n]*(?:\s(?:--upload-pack|--receive-pack|--exec)(?:=|\s|$)|ext::)/,
  },
  {
    label: '"core.sshCommand" (git configured to run programs)',
    pattern: /\bgit\b[^;&|\n]*\b(?:core\.(?:sshcommand|pager|editor|fsmonitor|hookspath|askpass|gitproxy)|alias\.|credential\.helper)/i,
  },
  { label: '".git/hooks" (code git runs)', pattern: /\.git\/hooks\b/ },
];

const ShellExecInput = z.strictObject({
  cmd: z.string().min(1).max(MAX_CMD_CHARS).describe("The command line to run in the sandbox's working directory"),
  timeout_s: z.int().min(1).max(120).default(20).describe("Seconds the command may run before it is stopped"),
});

/** The first rule `cmd` breaks, or undefined. */
export function dangerousIn(cmd: string): string | undefined {
  const unquoted = cmd.replace(/["'\\]/g, "");
  return DANGEROUS_COMMANDS.find(({ pattern }) => pattern.test(cmd) || pattern.test(unquoted))?.label;
}

/** `shell.exec` with its own allowlist and, when there is one, a sandbox to run in. */
export function createShellExec(options: { allow?: readonly string[]; sandbox?: ShellSandbox } = {}): ToolDefinition {
  const allow = [...(options.allow ?? DEFAULT_SHELL_ALLOW)];
  for (const name of allow) {
    if (!/^[A-Za-z0-9._+-]+$/.test(name)) throw new Error(`shell.exec allowlist entry ${JSON.stringify(name)} is not a plain command name`);
  }
  const allowed = new Set(allow);
  const { sandbox } = options;
  return defineTool({
    name: "shell.exec",
    description: `Run a shell command in the sandbox's working directory and return its exit code, stdout and stderr (each cut to 64 KiB). Each command's first word must be one of: ${allow.join(", ") || "(none)"}. Dangerous commands and command substitution are refused.`,
    input: ShellExecInput,
    risk: "side_effect",
    handler: async (input, ctx) => {
      const danger = dangerousIn(input.cmd);
      if (danger) return { ok: false, error: { code: "policy.denied", message: `shell.exec refused: the command contains ${danger}` } };
      const commands = parseCommandLine(input.cmd);
      if (commands === null) return { ok: false, error: { code: "tool.input_invalid", message: "cmd: a quote is never closed" } };
      if (commands.length === 0) return { ok: false, error: { code: "tool.input_invalid", message: "cmd: there is no command to run" } };
      const words = commands.flatMap((c) => (c.words[0] ? [c.words[0].text] : []));
      const refused = words.find((w) => !allowed.has(w));
      if (refused !== undefined)
        return {
          ok: false,
          error: {
            code: "policy.denied",
            message: `shell.exec refused: ${JSON.stringify(refused.slice(0, 64))} is not an allowed command (allowed: ${allow.join(", ") || "none"})`,
          },
        };
      const reason = commands.map(refusalFor).find((r) => r !== undefined);
      if (reason) return { ok: false, error: { code: "policy.denied", message: `shell.exec refused: ${reason}` } };

      if (!sandbox)
        return {
          ok: false,
          error: { code: "sandbox.unavailable", message: "shell.exec needs a sandbox, and none is configured for this gateway" },
        };
      return runInSandbox(sandbox, input.cmd, input.timeout_s, words[0] ?? "", ctx.signal, () => timedOut("shell.exec", ctx));
    },
  });
}

async function runInSandbox(
  sandbox: ShellSandbox,
  cmd: string,
  timeoutS: number,
  firstWord: string,
  callSignal: AbortSignal,
  callTimedOut: () => ToolOutcome,
): Promise<ToolOutcome> {
  if (callSignal.aborted) return callTimedOut();
  const timeoutMs = timeoutS * 1000;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error(`timeout_s (${timeoutS} s) elapsed`)), timeoutMs);
  const onCallAbort = () => controller.abort(callSignal.reason);
  callSignal.addEventListener("abort", onCallAbort, { once: true });
  try {
    const result = await untilAborted(sandbox.exec(cmd, { timeoutMs, signal: controller.signal }), controller.signal);
    if (result === ABORTED) {
      if (callSignal.aborted) return callTimedOut();
      return {
        ok: false,
        error: { code: "timeout", message: `shell.exec: the command did not finish within ${timeoutS} s`, retryable: true },
      };
    }
    const stdout = capUtf8(String(result.stdout ?? ""), MAX_SHELL_OUTPUT_BYTES);
    const stderr = capUtf8(String(result.stderr ?? ""), MAX_SHELL_OUTPUT_BYTES);
    const truncated = stdout.truncated || stderr.truncated;
    return {
      ok: true,
      output: { exit_code: result.exit_code, stdout: stdout.text, stderr: stderr.text, truncated },
      summary: `${firstWord} exited ${result.exit_code}${truncated ? " (output truncated)" : ""}`,
    };
  } catch {
    // The sandbox's own error text stays internal, as a thrown handler error would.
    return { ok: false, error: { code: "sandbox.unavailable", message: "the sandbox failed to run the command", retryable: true } };
  } finally {
    clearTimeout(timer);
    callSignal.removeEventListener("abort", onCallAbort);
  }
}

/** The registered `shell.exec`: default allowlist and no sandbox, so it fails closed with `sandbox.unavailable`. */
export const shellExec: ToolDefinition = createShellExec();

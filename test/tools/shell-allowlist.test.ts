/**
 * Issue 20 §6: `shell.exec` allowlists git subcommands, git and find options, and never writes into `.git/`.
 * Every form the issue lists, with obfuscations (quotes, backslashes, `=` or a separate value, bundled short
 * options, env-assignment prefixes, `;` / `&&` / `|` chains, newlines, subshells, shell expansions), and the
 * legitimate read-only commands that must still run.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createShellExec, type ShellSandbox } from "../../src/tools/builtin/shell";
import { GIT_SUBCOMMANDS, parseCommandLine } from "../../src/tools/builtin/shell-allow";
import type { ToolContext } from "../../src/tools/registry";

const ctx: ToolContext = {
  env,
  agentId: "shell-allow",
  runId: "run_shell",
  sessionKey: "agent:shell-allow:main",
  channel: "main",
  capabilities: [],
  toolCallId: "t1",
  signal: new AbortController().signal,
  timeoutMs: 30_000,
} as ToolContext;

function tool() {
  const calls: string[] = [];
  const sandbox: ShellSandbox = {
    exec: async (cmd) => {
      calls.push(cmd);
      return { exit_code: 0, stdout: "", stderr: "" };
    },
  };
  return { shell: createShellExec({ sandbox }), calls };
}

const subcommands = Object.keys(GIT_SUBCOMMANDS).join(", ");
const globals =
  "--no-pager, -P, --no-replace-objects, --literal-pathspecs, --glob-pathspecs, --noglob-pathspecs, --icase-pathspecs, --no-optional-locks, --version, -C";
const opt = (what: string, option: string) => `"${what} ${option}" is not on the allowlist of read-only ${what} options`;
const intoGit = (path: string) => `writing to "${path}" is not allowed: nothing may write into .git/`;
const findPred = (p: string) => `"find ${p}" is not on the allowlist of read-only find predicates`;
const expands = (word: string, cmd: string) =>
  `"${word}" would be expanded by the shell and could turn into an option; quote it in a ${cmd} command`;
const notCommand = (word: string) =>
  `${JSON.stringify(word)} is not an allowed command (allowed: ls, cat, echo, pwd, head, tail, wc, grep, find, git)`;

/** Each form refused by the new allowlist (these all reached the sandbox before issue 20 §6), with its reason. */
const refused: [string, string][] = [
  // git grep -O<cmd> / --open-files-in-pager, in every spelling
  ["git grep -Ocat TODO", opt("git grep", "-O")],
  ["git grep -O cat TODO", opt("git grep", "-O")],
  ["git grep -nOvim TODO", opt("git grep", "-O")],
  ["git grep -i'O'cat TODO", opt("git grep", "-O")],
  ['git grep "-Ocat" TODO', opt("git grep", "-O")],
  ["git gr\\ep -O\\cat TODO", opt("git grep", "-O")],
  ["git grep --open-files-in-pager=cat TODO", opt("git grep", "--open-files-in-pager")],
  ["git grep --open-files-in-pager cat TODO", opt("git grep", "--open-files-in-pager")],
  ["git grep --open TODO", opt("git grep", "--open")],
  ["git grep -e x --or -O less", opt("git grep", "-O")],
  // git configured to run programs
  ["git -ccore.pager=sh log", `"git -ccore.pager" is not one of git's allowed global options (${globals})`],
  ["git config diff.external ./x.sh", `"git config" is not an allowed git subcommand (allowed: ${subcommands})`],
  ["git config --global diff.external x", `"git config" is not an allowed git subcommand (allowed: ${subcommands})`],
  ["git difftool --extcmd=sh HEAD", `"git difftool" is not an allowed git subcommand (allowed: ${subcommands})`],
  ["git difftool -x sh HEAD", `"git difftool" is not an allowed git subcommand (allowed: ${subcommands})`],
  ["git diff --ext-diff HEAD", opt("git diff", "--ext-diff")],
  ["git show --textconv HEAD:a.bin", opt("git show", "--textconv")],
  ["git --git-dir=evil log", `"git --git-dir" is not one of git's allowed global options (${globals})`],
  ["git --work-tree=. status", `"git --work-tree" is not one of git's allowed global options (${globals})`],
  ["git --exec-path=/tmp log", `"git --exec-path" is not one of git's allowed global options (${globals})`],
  ["git init --bare evil", `"git init" is not an allowed git subcommand (allowed: ${subcommands})`],
  ["git remote add x https://example.com/r.git", `"git remote" takes no arguments here ("add")`],
  // git log --output=… and other writers
  ["git log --output=out.txt", opt("git log", "--output")],
  ["git log --output out.txt", opt("git log", "--output")],
  ["git log '--output'=.git/config", opt("git log", "--output")],
  ["git log --out=x", opt("git log", "--out")],
  ["git diff --output=x HEAD", opt("git diff", "--output")],
  // writing into .git/: paths, redirections, -C games
  ["echo '[core] pager = sh' > .git/config", intoGit(".git/config")],
  ["echo x >> .git/config", intoGit(".git/config")],
  ["echo x>.git/config", intoGit(".git/config")],
  ["echo x 2>.git/err", intoGit(".git/err")],
  ["echo x &>.git/out", intoGit(".git/out")],
  ["echo x >| ./.git/x", intoGit("./.git/x")],
  ["cat a <> .git/index", intoGit(".git/index")],
  ["echo x >&.git/x", intoGit(".git/x")],
  ["echo x > '.git'/config", intoGit(".git/config")],
  ["echo x > .g\\it/config", intoGit(".git/config")],
  ["echo x > .GIT/config", intoGit(".GIT/config")],
  ["echo x > repo/.git/info/exclude", intoGit("repo/.git/info/exclude")],
  ["git log > .git/FETCH_HEAD", intoGit(".git/FETCH_HEAD")],
  ["> .git/config", intoGit(".git/config")],
  ["ls > .gi?/config", 'the redirection target ".gi?/config" would be expanded by the shell; write to a plain path'],
  ["echo x > $HOME/.git/config", 'the redirection target "$HOME/.git/config" would be expanded by the shell; write to a plain path'],
  ["echo '[core] fsmonitor = sh' > ~/.gitconfig", 'writing to "~/.gitconfig" is not allowed: it is a git config file'],
  ["echo x >> /home/u/.config/git/config", 'writing to "/home/u/.config/git/config" is not allowed: it is a git config file'],
  ["echo x > /etc/gitconfig", 'writing to "/etc/gitconfig" is not allowed: it is a git config file'],
  ["git -C .git log", '"git -C .git" reaches into .git/'],
  ["git -C repo/.git status", '"git -C repo/.git" reaches into .git/'],
  // find options that write
  ["find . -fprint out.txt", findPred("-fprint")],
  ["find . -fprint0 out.txt", findPred("-fprint0")],
  ["find . -fprintf out.txt %p", findPred("-fprintf")],
  ["find . -fls out.txt", findPred("-fls")],
  ["find . -name x -o -fprint .git/info-x", findPred("-fprint")],
  ['find . "-fprint" out', findPred("-fprint")],
  ["find . -fp\\rint out", findPred("-fprint")],
  ["fi'n'd . -fls out", findPred("-fls")],
  ["find . -D exec", findPred("-D")],
  ["find . -fp*t out", expands("-fp*t", "find")],
  ["find . -{fprint,name} out", expands("-{fprint,name}", "find")],
  ["find $HOME -name x", expands("$HOME", "find")],
  ["git grep -O* x", expands("-O*", "git")],
  // chains, newlines, pipes
  ["ls && git grep -Ocat x", opt("git grep", "-O")],
  ["git status; find . -fprint x", findPred("-fprint")],
  ["cat a | git grep -Ocat x", opt("git grep", "-O")],
  ["ls\ngit log --output=x", opt("git log", "--output")],
  ["git status || echo x > .git/config", intoGit(".git/config")],
];

describe("ISSUE20-§6 shell.exec allowlists git and find options and never writes into .git/", () => {
  for (const [cmd, reason] of refused) {
    it(`ISSUE20-§6 refused: ${JSON.stringify(cmd)}`, async () => {
      const { shell, calls } = tool();
      expect(await shell.handler({ cmd }, ctx)).toEqual({
        ok: false,
        error: { code: "policy.denied", message: `shell.exec refused: ${reason}` },
      });
      expect(calls).toEqual([]);
    });
  }

  // Already refused before issue 20 §6 by the dangerous-substring rules (they run first); kept here so every
  // form the issue lists is covered.
  const stillRefused: [string, string][] = [
    ["git -c core.pager=sh log", '"git -c" (git configured to run programs)'],
    ["git -c core.pager='less; sh' log", '"git -c" (git configured to run programs)'],
    ["find . -exec sh {} ;", '"-exec" (find running commands or deleting)'],
    ["find . -execdir sh {} +", '"-exec" (find running commands or deleting)'],
    ["find . -ok sh {} ;", '"-exec" (find running commands or deleting)'],
    ["find . -okdir sh {} ;", '"-exec" (find running commands or deleting)'],
    ["find . -delete", '"-exec" (find running commands or deleting)'],
    ["ls || find . -name x -delete", '"-exec" (find running commands or deleting)'],
  ];
  for (const [cmd, label] of stillRefused) {
    it(`ISSUE20-§6 still refused: ${JSON.stringify(cmd)}`, async () => {
      const { shell, calls } = tool();
      expect(await shell.handler({ cmd }, ctx)).toEqual({
        ok: false,
        error: { code: "policy.denied", message: `shell.exec refused: the command contains ${label}` },
      });
      expect(calls).toEqual([]);
    });
  }

  // Subshells and env-assignment prefixes never reach the option checks: their first word is not allowlisted
  // (already so before issue 20 §6).
  const notAllowlisted: [string, string][] = [
    ["(git grep -Ocat x)", notCommand("(git")],
    ["ls && (find . -fprint x)", notCommand("(find")],
    ["GIT_PAGER=sh git log", notCommand("GIT_PAGER=sh")],
    ["GIT_DIR=.git git status", notCommand("GIT_DIR=.git")],
    ["env GIT_EXTERNAL_DIFF=sh git diff", notCommand("env")],
  ];
  for (const [cmd, reason] of notAllowlisted) {
    it(`ISSUE20-§6 still refused by the command allowlist: ${JSON.stringify(cmd)}`, async () => {
      const { shell, calls } = tool();
      expect(await shell.handler({ cmd }, ctx)).toEqual({
        ok: false,
        error: { code: "policy.denied", message: `shell.exec refused: ${reason}` },
      });
      expect(calls).toEqual([]);
    });
  }

  it("ISSUE20-§6 legitimate read-only commands still run", async () => {
    const { shell, calls } = tool();
    const commands = [
      "git status",
      "git status -sb --porcelain=v1",
      "git -C repo log --oneline -n 5",
      "git --no-pager log -5 --stat --format='%h %s'",
      "git log -p --follow -- src/index.ts",
      "git log HEAD@{1} -1",
      "git diff HEAD~1 --stat",
      "git diff --cached --name-only",
      "git show HEAD:README.md",
      "git ls-files -z --others --exclude-standard",
      "git grep -n TODO",
      "git grep -nie foo -- '*.ts'",
      "git grep -C 3 -c x",
      "git blame -L 1,10 README.md",
      "git rev-parse --show-toplevel",
      "git branch -a",
      "git remote -v",
      "git describe --tags --always",
      "find . -name '*.md' -type f",
      "find . -maxdepth 2 -mtime -7 -print",
      "find src -size +10k -ls",
      "find . \\( -name a -o -name b \\) -print0",
      "find . -path ./node_modules -prune -o -name '*.ts' -print",
      "ls -la > listing.txt",
      "echo done >> notes/log.txt",
      "cat .git/HEAD",
      "ls .git",
      "grep -rn TODO src 2>/dev/null | head -n 5",
      "wc -l *.md 2>&1",
      'echo "a > .git/config"',
    ];
    for (const cmd of commands) expect({ cmd, outcome: await shell.handler({ cmd }, ctx) }).toMatchObject({ cmd, outcome: { ok: true } });
    expect(calls).toEqual(commands);
  });

  it("ISSUE20-§6 the parser splits words and redirections as a shell does", () => {
    expect(parseCommandLine("git log 2>&1 >out.txt | head -n 3 && echo 'a b'\"c\"")).toEqual([
      {
        words: [
          { text: "git", expands: false },
          { text: "log", expands: false },
        ],
        writes: [{ text: "out.txt", expands: false }],
      },
      {
        words: [
          { text: "head", expands: false },
          { text: "-n", expands: false },
          { text: "3", expands: false },
        ],
        writes: [],
      },
      {
        words: [
          { text: "echo", expands: false },
          { text: "a bc", expands: false },
        ],
        writes: [],
      },
    ]);
    expect(parseCommandLine('echo "a\\"b" 2 > x')).toEqual([
      {
        words: [
          { text: "echo", expands: false },
          { text: 'a"b', expands: false },
          { text: "2", expands: false },
        ],
        writes: [{ text: "x", expands: false }],
      },
    ]);
    expect(parseCommandLine("echo 'open")).toBeNull();
  });
});

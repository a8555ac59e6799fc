// Loads a plugin's `app.js` into Node for its tests as the build makes it:
// the SDK (mailer-plugin.js) in front of it, one script. The plugin's WIT
// imports (`import … from "mailer:plugin/…"`) are bound to `undefined` —
// a harness stands in for the host — and its `export`s become plain
// declarations. Returns every top-level function, class and constant of
// the SDK and of the plugin by name:
//
//     import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";
//     const { flagDeclines, forget, ProcessHarness } = loadPlugin(new URL("./app.js", import.meta.url));
import { readFileSync } from "node:fs";

const sdk = readFileSync(new URL("./mailer-plugin.js", import.meta.url), "utf8");
const wit = /^import\s+(?:\*\s+as\s+([\w$]+)|\{([^}]*)\})\s+from\s+"mailer:plugin\/[^"]+";?[ \t]*$/gm;
const topLevel = /^(?:async\s+)?(?:function\*?|class|const|let|var)\s+([\w$]+)/gm;
const destructured = /^(?:const|let|var)\s*\{([^}]*)\}\s*=/gm;

/** The SDK and the plugin at `app` (a path or file URL; the SDK alone
 *  without one), evaluated; their top-level names. */
export function loadPlugin(app) {
  const imported = [];
  const plugin = (app === undefined ? "" : readFileSync(app, "utf8"))
    .replace(wit, (_, star, named) => {
      const names = star ? [star] : named.split(",").map((n) => n.trim().split(/\s+as\s+/).pop());
      imported.push(...names.filter(Boolean));
      return "";
    })
    .replace(/^export\s+/gm, "");
  const source = `${sdk}\n${plugin}`;
  const names = [...source.matchAll(topLevel)].map((m) => m[1]);
  for (const [, list] of source.matchAll(destructured)) {
    names.push(...list.split(",").map((n) => n.trim().split(/\s*:\s*/).pop()).filter(Boolean));
  }
  return new Function(...imported, `${source}\nreturn { ${names.join(", ")} };`)();
}

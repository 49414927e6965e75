// The extension's pure logic, one module a concern (none imports `vscode`, so all run and are
// tested under plain Node):
//   settings.ts        the lookahead.* settings read and checked, and the daemon's share of them
//   commandLines.ts    the daemon program's command lines, and how that program is found
//   cursorReports.ts   where the cursor rests, told to the daemon
//   restartBackoff.ts  when a crashed server is started again
//   statusView.ts      what the status bar item says, and its menu
//   modelCatalogue.ts  the daemon's model list, and the model picker's items
// Re-exported here for install.ts and installer.ts, which import them from './logic'.

export * from './settings';
export * from './commandLines';
export * from './cursorReports';
export * from './restartBackoff';
export * from './statusView';
export * from './modelCatalogue';

/** For bench/logs.ts: stages that print $LOGS_MB megabytes of 99-character lines ("big") and a tenth of that ("tenth"). */
import { workflow } from "atomic";

const spew = (mb: number) => `head -c ${Math.round(mb * 1_000_000)} /dev/zero | tr '\\0' 'a' | fold -w 99; echo`;

export default workflow({
  name: "logs",
  async run(ctx) {
    const mb = Number(process.env.LOGS_MB ?? "70");
    await ctx.shell("big", spew(mb));
    await ctx.shell("tenth", spew(mb / 10));
  },
});

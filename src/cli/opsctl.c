/* opsctl.c - placeholder until the command line client lands. */
#include <stdio.h>
int main(void) { fputs("opsctl: not built yet\n", stderr); return 1; }
